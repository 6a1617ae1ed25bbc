"""docs/grading.md keeps up with the grader: its task table is the one the masters give, every
message the grader stops with is in its troubleshooting section, and every command's --help
lists what the docs show."""
import ast
import re
from pathlib import Path

import pytest

from milktea.grade import tables

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "grading.md").read_text(encoding="utf-8")
# where an instructor's mistake stops the grader (child.py, protocol.py, ... speak to learners)
MODULES = ("assignment", "prepare", "public_checks", "release", "classroom", "lms", "gradescope", "spec",
           "limits", "check", "isolation", "autograder", "submissions")


def test_the_task_table_is_generated():
    block = re.search(r"<!-- generated: python -m milktea.grade tasks solutions -->\n(.*?)<!-- end generated -->",
                      DOC, re.S)
    assert block, "docs/grading.md lost its generated task table"
    assert block.group(1) == tables.markdown(str(ROOT / "solutions")), \
        "the task table is stale: python -m milktea.grade tasks solutions, and paste it between the markers"


def _messages():
    """(module, line, the longest literal piece) of each error the grader raises for a person."""
    for name in MODULES:
        path = ROOT / "milktea" / "grade" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func = node.exc.func
            if getattr(func, "id", None) not in ("SetupError", "ValueError", "TypeError", "Unavailable") \
                    or not node.exc.args:
                continue
            pieces = [n.value for n in ast.walk(node.exc.args[0]) if isinstance(n, ast.Constant)
                      and isinstance(n.value, str)]
            words = max((p.strip(" :;,.()'\"") for p in pieces), key=len, default="")
            if len(words) >= 12:
                yield name, node.lineno, words


@pytest.mark.parametrize("module, line, words", list(_messages()), ids=lambda v: str(v)[:40])
def test_every_message_is_in_the_troubleshooting_section(module, line, words):
    troubleshooting = DOC[DOC.index("## 7. Troubleshooting"):DOC.index("## The course's exercises")]
    flat = " ".join(troubleshooting.split())
    assert " ".join(words.split()) in flat, f"milktea/grade/{module}.py:{line}: say what {words!r} means in docs/grading.md"


def _help(main, argv, capsys) -> str:
    with pytest.raises(SystemExit):
        main(argv + ["--help"])
    return capsys.readouterr().out


def test_every_command_lists_what_the_docs_show(capsys):
    from milktea.grade import __main__ as grade, check, gradescope, release
    top = _help(grade.main, [], capsys)
    for command in ("release", "gradescope", "tasks", "milktea.grade.check"):
        assert command in top, command
    for main, argv, section in ((grade.main, [], "## 4. Grade"), (gradescope.main, [], "**Gradescope.**"),
                                (release.main, [], "## 2. Release it"), (check.main, [], "**Students check")):
        text = _help(main, argv, capsys)
        start = DOC.index(section)
        shown = re.split(r"\n## |\n\*\*", DOC[start + 3:])[0]   # up to the next heading or bold paragraph
        for flag in sorted(set(re.findall(r"--[a-z][a-z-]+", shown))):
            assert flag in text, (section, flag)
