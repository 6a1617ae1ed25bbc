"""Every option of `python -m milktea.train` and `python -m milktea compare` passes through
torchrun untouched: torchrun's own parser (argparse, with abbreviations) would take an
option that is a prefix of one of its own (`--log` matches `--log-dir` and `--logs-specs`)
and stop with "ambiguous option", or swallow it."""
import pytest

torch_run = pytest.importorskip("torch.distributed.run")

compare = __import__("milktea.distributed.compare_cli", fromlist=["build_parser"])
train = __import__("milktea.distributed.train", fromlist=["build_parser"])


def _long_options(parser):
    return sorted(o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help"))


TORCHRUN = _long_options(torch_run.get_args_parser())
OURS = {"milktea.train": _long_options(train.build_parser()),
        "milktea compare": _long_options(compare.build_parser())}


def test_torchrun_has_the_options_we_guard_against():
    assert "--log-dir" in TORCHRUN and "--nproc-per-node" in TORCHRUN and len(TORCHRUN) > 30


@pytest.mark.parametrize("prog", sorted(OURS))
def test_no_option_is_a_prefix_of_a_torchrun_option(prog):
    clashes = {o: [t for t in TORCHRUN if t.startswith(o)] for o in OURS[prog]}
    clashes = {o: ts for o, ts in clashes.items() if ts}
    assert not clashes, f"{prog}: these options would be taken by torchrun's parser: {clashes}"
    assert all(o.startswith("--") for o in OURS[prog]), "a short option could be one of torchrun's"


@pytest.mark.parametrize("prog", sorted(OURS))
def test_torchrun_hands_every_option_to_the_script(prog):
    for opt in OURS[prog]:
        args = torch_run.get_args_parser().parse_args(
            ["--nproc-per-node", "2", "-m", "milktea.train", opt, "1", "--steps", "2"])
        assert args.training_script == "milktea.train"
        assert args.training_script_args == [opt, "1", "--steps", "2"], opt


def test_our_parsers_take_no_abbreviations():
    with pytest.raises(SystemExit):
        train.build_parser().parse_args(["--step", "3"])
    assert train.build_parser().parse_args(["--steps", "3"]).steps == 3


def test_the_command_line_is_generated_from_trainconfig():
    from dataclasses import fields
    names = {f.name for f in fields(train.TrainConfig)}
    a = train.build_parser().parse_args([])
    assert names <= set(vars(a)), "every TrainConfig field has an option in milktea.train"
    c = compare.build_parser().parse_args(["--hidden", "64", "--loopback"])
    assert names - {"scheme"} <= set(vars(c))
    cfg = train.config_from_arguments(c)
    assert cfg.hidden == 64 and cfg.steps == 20 and cfg.link_gbit == 1.0   # compare's own defaults
    assert train.config_from_arguments(a) == train.TrainConfig()
