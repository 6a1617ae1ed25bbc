"""The assignment format (milktea/grade/assignment.py, public_checks.py, release.py) in process:
a master notebook and its tests file are read, checked and turned into public checks; every
instructor's mistake is a clear error before anything is graded."""
import json
import textwrap

import numpy as np
import pytest

from milktea.grade import assignment, public_checks
from milktea.grade.assignment import SetupError
from milktea.grade.notebook import assignment_of, atomic_write, notebook_text
from milktea.grade.prepare import check_hidden_dir, prepare
from milktea.grade.release import exercise_from, release, strip_solution

TESTS = '''
import functools
from milktea.grade.spec import Case, Task, number

def _cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case("three", (3,))]
    return fixed + [Case("random", (int(rng.integers(1, 100)),)) for _ in range(2)]

TASKS = [Task("q1", "double", 2, _cases, number()),
         Task("q2", "answer", 1, lambda rng, ref: [Case("none", ())], number(), reveal=False)]

### BEGIN HIDDEN TESTS
HIDDEN = {"q1": functools.partial(_cases, hidden=True)}
### END HIDDEN TESTS
'''


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text, *tags):
    return {"cell_type": "code", "metadata": {"tags": list(tags)} if tags else {}, "outputs": [],
            "execution_count": None, "source": text}


def _master(heading1="## Task q1 · Twice the input (2 points)", heading2="## Question two (1 point)"):
    return {"cells": [_md("# Homework"), _md(heading1),
                      _code("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n",
                            "graded", "task:q1"),
                      _md(heading2), _code("def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n",
                                           "graded", "task:q2")],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _write(folder, nb=None, tests=TESTS, name="hw"):
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(str(folder / f"{name}.ipynb"), notebook_text(nb or _master()))
    if tests is not None:
        (folder / f"{name}.tests.py").write_text(tests)
    return folder / f"{name}.ipynb"


def test_a_master_and_its_tests_make_an_assignment(tmp_path):
    a = assignment.load(str(_write(tmp_path)))
    assert [t.id for t in a.tasks] == ["q1", "q2"] and a.points == 3
    assert a.title("q1") == "Twice the input" and a.title("q2") == "Question two"
    p = prepare(a, seed=1)
    q1 = p.tasks[0]
    assert q1.public == 3 and len(q1.cases) == 5 and q1.expected[0] == 6
    assert q1.task.params == ("x",)                      # from the master's function
    assert prepare(a, seed=1).tasks[0].encoded == q1.encoded != prepare(a, seed=2).tasks[0].encoded


def test_a_translation_gives_its_own_titles(tmp_path):
    _write(tmp_path)
    _write(tmp_path / "zh", _master("## 任务 q1 · 输入的两倍（2 分）", "## 第二题（1 分）"), tests=None)
    a = assignment.load(str(tmp_path / "hw.ipynb"))
    assert a.title("q1", "zh") == "输入的两倍" and a.title("q2", "zh") == "第二题" and a.title("q1") == "Twice the input"


@pytest.mark.parametrize("tests, nb, words", [
    (None, None, "has no tests file"),
    ("TASKS = []\n", None, "must define TASKS"),
    ("TASKS = [\n", None, "line 1: syntax error"),
    ("raise ValueError('oops')\n", None, "failed when run: ValueError: oops"),
    (TESTS.replace("### BEGIN HIDDEN TESTS\n", ""), None, "without ### BEGIN HIDDEN TESTS"),
    (TESTS.replace("### END HIDDEN TESTS\n", ""), None, "is never closed"),
    (TESTS.replace("### BEGIN HIDDEN TESTS\n", "").replace("### END HIDDEN TESTS\n", ""), None,
     "HIDDEN must sit between"),
    (TESTS.replace('HIDDEN = {"q1"', 'HIDDEN = {"q9"'), None, "ids among q1, q2"),
    (TESTS.replace('Task("q1", "double", 2', 'Task("q1", "double", 3'), None, "says 2 points, its tests file 3"),
    (TESTS, _master() | {"cells": _master()["cells"][:3]}, "exactly one code cell tagged 'graded' and 'task:q2'"),
    (TESTS, _master() | {"cells": _master()["cells"] + [_code("x = 1", "graded", "task:q7")]},
     "task:q7, which"),
])
def test_an_instructors_mistake_is_a_clear_error(tmp_path, tests, nb, words):
    with pytest.raises(SetupError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        a = assignment.load(str(_write(tmp_path, nb, tests)))
        prepare(a)


def test_a_reference_that_fails_names_the_case(tmp_path):
    nb = _master()
    nb["cells"][2] = _code("def double(x):\n    ### BEGIN SOLUTION\n    return 1 / (x - 3)\n    ### END SOLUTION\n",
                           "graded", "task:q1")
    with pytest.raises(SetupError, match="reference double fails on case 'three' of task q1: ZeroDivisionError"):
        prepare(assignment.load(str(_write(tmp_path, nb))))


def test_the_hidden_folder_is_checked_before_anyone_is_graded(tmp_path):
    names = ["hw"]
    with pytest.raises(SetupError, match="no such folder"):
        check_hidden_dir(str(tmp_path / "nope"), names)
    (tmp_path / "h").mkdir()
    with pytest.raises(SetupError, match="holds no <assignment>.py file"):
        check_hidden_dir(str(tmp_path / "h"), names)
    (tmp_path / "h" / "hw2.py").write_text("CASES = {}\n")
    with pytest.raises(SetupError, match="named after no assignment"):
        check_hidden_dir(str(tmp_path / "h"), names)
    (tmp_path / "h" / "hw2.py").rename(tmp_path / "h" / "hw.py")
    (tmp_path / "h" / "hw.py").write_text("CASES = {\n")
    with pytest.raises(SetupError, match=r"hw.py, line 1: syntax error"):
        check_hidden_dir(str(tmp_path / "h"), names)
    (tmp_path / "h" / "hw.py").write_text("CASES = {'q1': [('seven', (7,))]}\n")
    assert check_hidden_dir(str(tmp_path / "h"), names) == {"hw": str(tmp_path / "h" / "hw.py")}
    a = assignment.load(str(_write(tmp_path / "hw")))
    p = prepare(a, 0, str(tmp_path / "h" / "hw.py"))
    assert [c.label for c in p.tasks[0].cases[3:]] == ["random", "random", "seven"]


def test_public_checks_ship_values_or_hashes_and_no_solution(tmp_path):
    a = assignment.load(str(_write(tmp_path)))
    data = public_checks.build(a)
    text = public_checks.text(data)
    assert "return 2 * x" not in text and "return 42" not in text and "HIDDEN = " not in text
    q1, q2 = data["tasks"]
    assert all("expected" in c for c in q1["cases"]) and all("hash" in c and "expected" not in c for c in q2["cases"])
    p = public_checks.prepared(json.loads(text))
    assert [t.task.id for t in p.tasks] == ["q1", "q2"] and p.tasks[0].public == 3
    hashed = p.tasks[1].expected[0]
    assert hashed.matches(42) and hashed.matches(42.0000001) and not hashed.matches(41)
    assert public_checks.compare_hashed(hashed, 41).startswith("not the expected answer")
    assert public_checks.same(data, json.loads(text))
    noisy = json.loads(text)
    noisy["tasks"][0]["cases"][0]["expected"] = 6 + 1e-13   # another machine's last bit: still up to date
    assert public_checks.same(noisy, data)
    moved = json.loads(text)
    moved["tasks"][0]["cases"][0]["args"] = [4]
    assert not public_checks.same(moved, data)


def test_release_writes_only_its_files_and_never_into_the_masters(tmp_path):
    _write(tmp_path / "hw")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    paths, stale = release(str(tmp_path / "hw"), str(out))
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["hw.checks.json", "hw.ipynb"] and len(stale) == 2
    assert (out / "notes.md").read_text() == "mine"
    assert release(str(tmp_path / "hw"), str(out), check=True)[1] == []
    with pytest.raises(SetupError, match="lies inside"):
        release(str(tmp_path / "hw"), str(tmp_path / "hw" / "rel"))


def test_scaffolds_speak_the_notebooks_language():
    src = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert "# YOUR CODE HERE" in strip_solution(src) and "replace this line" in strip_solution(src)
    zh = strip_solution(src, "zh")
    assert "# 在这里写你的代码" in zh and 'NotImplementedError("请把这一行换成你的代码")' in zh
    nb = exercise_from(_master(), "zh", "hw")
    assert nb["metadata"]["milktea"] == {"role": "exercise", "assignment": "hw", "lang": "zh"}


def test_a_notebook_is_matched_to_its_assignment():
    known = ["hw1", "hw10", "03_topk"]
    assert assignment_of("hw10.ipynb", None, known) == "hw10"
    assert assignment_of("hw1 (2).ipynb", None, known) == "hw1"
    assert assignment_of("hw1_final.ipynb", None, known) is None
    assert assignment_of("03_mine.ipynb", None, known) == "03_topk"
    assert assignment_of("x.ipynb", {"metadata": {"milktea": {"assignment": "hw10"}}}, known) == "hw10"


def test_hashes_round_to_the_tasks_digits():
    salt = "hw/q1/0"
    h = public_checks.Hashed.of(np.array([1.0, 2.0]), 6, salt)
    assert h.matches(np.array([1.0000001, 2.0])) and not h.matches(np.array([1.001, 2.0]))
    assert not h.matches(np.array([1.0, 2.0, 0.0])) and not h.matches("text")
    assert public_checks.Hashed.of(3, 6, salt) == public_checks.Hashed.of(3.0, 6, salt)
    assert public_checks.Hashed.of(3, 6, salt) != public_checks.Hashed.of(3, 6, "hw/q1/1")   # salted per case


def test_the_tests_file_text_is_stripped_of_hidden_regions():
    text = textwrap.dedent(TESTS)
    public = assignment.strip_hidden(text)
    assert "HIDDEN" not in public and "TASKS = [" in public
