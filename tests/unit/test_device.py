import importlib
import importlib.metadata
import json
import os
import sys
import types

import pytest
import torch

from milktea import __main__ as cli
from milktea.device import ENV_VAR, environment_report, format_report, pick_device


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_default_is_cuda_else_cpu(no_env):
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert pick_device().type == want
    assert pick_device("auto").type == want


def test_default_without_cuda_is_cpu(no_env, no_cuda):
    assert pick_device() == torch.device("cpu")


def test_env_var_overrides_the_automatic_choice(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "cpu")
    assert pick_device() == torch.device("cpu")
    monkeypatch.setenv(ENV_VAR, " CPU ")
    assert pick_device() == torch.device("cpu")


def test_explicit_argument_beats_env_var(monkeypatch, no_cuda):
    monkeypatch.setenv(ENV_VAR, "cuda")
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=ENV_VAR):
        pick_device()


def test_cuda_without_cuda_is_a_clear_error(no_env, no_cuda):
    for ask in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match="CUDA is not available") as e:
            pick_device(ask)
        assert "'cpu'" in str(e.value)  # says what to use instead


def test_cuda_index_out_of_range(monkeypatch, no_env):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match="only 2 CUDA device"):
        pick_device("cuda:2")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:1", "", "tpu"])
def test_bad_names_list_the_choices(bad, no_env):
    with pytest.raises(ValueError, match="'cuda:N'"):
        pick_device(bad)


def test_bad_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "gpu0")
    with pytest.raises(ValueError, match=ENV_VAR):
        pick_device()


def test_bad_type(no_env):
    with pytest.raises(TypeError, match="str"):
        pick_device(0)


def test_environment_report_is_true_and_plain(no_env):
    d = environment_report()
    json.dumps(d)  # plain data only
    for key in ("python", "torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab",
                "cuda_available", "cuda_device_count", "cuda_device_names", "nccl_available",
                "gloo_available", "device", "cpu_cores", "torch_threads", "ipywidgets_importable"):
        assert key in d, key
    assert d["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert d["torch"] == torch.__version__
    assert d["numpy"] == importlib.metadata.version("numpy")
    assert d["cuda_available"] == torch.cuda.is_available()
    assert d["cuda_device_count"] == (torch.cuda.device_count() if d["cuda_available"] else 0)
    assert len(d["cuda_device_names"]) == d["cuda_device_count"]
    assert d["gloo_available"] == torch.distributed.is_gloo_available()
    assert d["device"] == str(pick_device())
    assert d["cpu_cores"] == len(os.sched_getaffinity(0))
    assert d["torch_threads"] == torch.get_num_threads()
    assert d["ipywidgets_importable"] is True


def test_environment_report_survives_a_bad_override(monkeypatch, no_cuda):
    monkeypatch.setenv(ENV_VAR, "cuda")
    d = environment_report()
    assert d["device"] is None and "CUDA is not available" in d["device_error"]
    assert d["device_override"] == "cuda"


def test_format_report_shows_every_key_and_advice(no_env):
    from milktea import i18n
    from milktea.device import LABELS
    d = environment_report()
    text = format_report(d)
    for key in d:
        assert (LABELS.get(key) or key) in text
    assert "advice" not in text  # this environment is complete
    assert d["cjk_font"].startswith("Milktea Sans SC")  # the font figures use for Chinese
    with i18n.speaking("zh"):
        zh = format_report(d)
    assert "milktea 环境检查" in zh and "gloo 可用" in zh and " 是" in zh and "yes" not in zh
    broken = dict(d, ipywidgets_importable=False, ipywidgets=None)
    assert "ipywidgets does not import" in format_report(broken)
    no_lab_ext = dict(d, jupyterlab="4.2.0", jupyterlab_widgets=None)
    assert "Error displaying widget" in format_report(no_lab_ext)


def test_cli_unknown_command_lists_commands(capsys):
    assert cli.main(["brew-tea"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'brew-tea'" in err and "doctor" in err


def test_cli_no_command_prints_usage(capsys):
    assert cli.main([]) == 2
    assert "doctor" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0


def test_every_registered_command_resolves():
    for name, (target, help_) in cli.COMMANDS.items():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), name
        assert help_.strip(), name


def test_commands_are_imported_lazily_and_get_their_args(monkeypatch):
    seen = {}
    fake = types.ModuleType("milktea_fake_command")

    def run(argv):
        seen["argv"] = argv
        return 7

    fake.run = run
    monkeypatch.setitem(sys.modules, "milktea_fake_command", fake)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("milktea_fake_command:run", "a test"))
    assert "argv" not in seen
    assert cli.main(["fake", "--x", "1"]) == 7
    assert seen["argv"] == ["--x", "1"]


def test_docstring_examples(no_env):
    import doctest

    import milktea.device
    result = doctest.testmod(milktea.device)
    assert result.attempted >= 3 and result.failed == 0
