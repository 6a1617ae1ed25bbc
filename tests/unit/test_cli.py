"""The command lines, called in this process (`main(argv)`; nothing is launched): each wrong
setting ends in one line that says what to change, names get a "did you mean", `--import`
makes a user's own compressor a scheme, and `--help` states one default per option."""
import argparse

import pytest

from milktea import __main__ as top
from milktea.cli import did_you_mean, import_modules
from milktea.distributed import compare_cli, schemes, train

USER_MODULE = '''
from milktea import Cast
from milktea.distributed import schemes

class Half(Cast):
    """float16 on the wire, as a user would subclass a compressor in a file of their own"""

schemes.register("{name}", Half())
'''


def _one_line_error(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("main", [compare_cli.parse, train.main], ids=["compare", "train"])
@pytest.mark.parametrize("argv,says", [
    (["--ratio", "2"], "ratio must be in (0, 1]"),
    (["--ratio", "abc"], "argument --ratio: invalid float value: 'abc'"),
    (["--lr", "0"], "lr must be > 0"),
    (["--momentum", "1"], "momentum must be < 1"),
    (["--steps", "0"], "steps must be >= 1"),
    (["--link", "-1"], "link_gbit (None: no emulation) must be > 0"),
    (["--task", "gtp"], "unknown task 'gtp' (did you mean 'gpt'?); choose from digits, gpt"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--timeout", "0"], "--timeout must be > 0 seconds"),
    (["--import", "no_such_module_of_yours"], "cannot import it (ModuleNotFoundError"),
    (["--import", "/no/such/folder/mine.py"], "no such file"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_every_wrong_setting_is_one_line_that_says_what_to_change(main, argv, says, capsys):
    assert says in _one_line_error(main, argv, capsys)


def test_names_get_a_did_you_mean(capsys):
    err = _one_line_error(compare_cli.parse, ["--schemes", "dense,topk,int9"], capsys)
    assert "unknown scheme 'int9' (did you mean 'int8'?)" in err and "--import" in err
    assert "did you mean 'topk'?" in _one_line_error(train.main, ["--scheme", "top-k"], capsys)
    assert "give each scheme once" in _one_line_error(compare_cli.parse, ["--schemes", "dense,dense"], capsys)
    assert top.main(["comapre"]) == 2
    assert "unknown command 'comapre' (did you mean 'compare'?)" in capsys.readouterr().err
    assert did_you_mean("zzzz", ["dense", "topk"]) == ""


def test_import_makes_a_users_compressor_a_scheme_of_the_command_line(tmp_path):
    """What the workers will run, checked without starting them (tests/integration/
    test_compare_import.py runs it on two ranks)."""
    (tmp_path / "my_half.py").write_text(USER_MODULE.format(name="my-half"))
    try:
        names, config, _ = compare_cli.parse(["--import", str(tmp_path / "my_half.py"), "--schemes", "dense,my-half",
                                              "--steps", "3"])
        assert names == ["dense", "my-half"] and config.steps == 3
        entries = schemes.registered(names)                      # what compare() hands every worker
        assert list(entries) == ["my-half"] and type(entries["my-half"][1](0.01, 4)).__module__ == "my_half"
        assert schemes.uses_ledger("my-half") is False            # a Cast: unbiased, no ledger by default
        assert import_modules(["my_half"]) == ["my_half"]        # now by name, too
    finally:
        schemes.unregister("my-half")


@pytest.mark.parametrize("parser", [compare_cli.build_parser, train.build_parser], ids=["compare", "train"])
def test_help_states_one_default_per_option(parser):
    for action in parser()._actions:
        if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        assert action.help.count("(default") == 1 and action.help.count("default") == 1, \
            (action.option_strings, action.help)
    def link_help(p):
        return next(a.help for a in p._actions if "--link" in a.option_strings)
    assert link_help(compare_cli.build_parser()).endswith("(default: 1)")      # compare's own default
    assert link_help(train.build_parser()).endswith("(default: no emulation, the link as it is)")
