"""A class like an instructor's own, graded in the sandbox: a numpy homework written outside the
library (softmax, moving average, word counts, a reveal=False task; hidden tests in the tests
file and in a --hidden folder), a roster, overrides, a late policy, and a class that holds a
100 MB notebook, a Latin-1 folder, a student who walks Python frames and reads tracebacks, one
who imports scipy, scikit-learn, matplotlib and numba, an untouched release, a helper that
raises in another task's cell, a printer and a formula for a name. Every honest student is
right, every word is true, and no path of the grader's machine reaches what a student sees.
Then the comparator is edited and the class regraded, and a fresh interpreter that can import
neither torch nor numba grades it. About 15 CPU-seconds."""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from _grade_helpers import ROOT, code_cell, graded_cell, save, with_cell
from milktea.grade import classroom, isolation
from milktea.grade.notebook import read_notebook

BOX = isolation.probe()
pytestmark = pytest.mark.skipif(not BOX.isolated and os.environ.get("CI") != "true",
                                reason=f"no sandbox here: {BOX.why}")
CELLS = {
    "hw3.1": ("Stable softmax", 3, "import numpy as np\n\ndef softmax(x):\n    ### BEGIN SOLUTION\n"
              "    z = np.asarray(x, dtype=np.float64)\n    e = np.exp(z - z.max())\n    return e / e.sum()\n"
              "    ### END SOLUTION\n"),
    "hw3.2": ("Moving average", 2, "import numpy as np\n\ndef moving_average(x, w):\n    ### BEGIN SOLUTION\n"
              "    c = np.cumsum(np.concatenate([[0.0], np.asarray(x, float)]))\n    return (c[w:] - c[:-w]) / w\n"
              "    ### END SOLUTION\n"),
    "hw3.3": ("Count words", 2, "def count_words(text):\n    ### BEGIN SOLUTION\n    out = {}\n"
              "    for w in text.lower().split():\n        out[w] = out.get(w, 0) + 1\n    return out\n"
              "    ### END SOLUTION\n"),
    "hw3.4": ("Top word", 1, "def top_word(text):\n    ### BEGIN SOLUTION\n    c = count_words(text)\n"
              "    return max(sorted(c), key=lambda w: c[w])\n    ### END SOLUTION\n"),
}
TESTS = '''import numpy as np
from milktea.grade.spec import Case, Task, array

WORDS = ["tea", "milk", "boba", "sugar", "ice", "cup", "straw", "lid"]


def _soft(rng, ref):
    return [Case("big values", (np.array([1000.0, 1001.0, 1002.0]),))] + [
        Case("random", (rng.standard_normal(10) * 50,)) for _ in range(2)]


def _avg(rng, ref):
    return [Case("w = 2", (np.arange(6.0), 2)), Case("random", (rng.standard_normal(20), 3))]


def _text(rng, n):
    return " ".join(rng.choice(WORDS, n))


def _same(expected, got, args):
    return None if got == expected else "not the same words and counts"


TASKS = [Task("hw3.1", "softmax", 3, _soft, array(rtol=1e-9)),
         Task("hw3.2", "moving_average", 2, _avg, array(rtol=1e-9)),
         Task("hw3.3", "count_words", 2, lambda rng, ref: [Case("two words", ("tea tea milk",))], _same),
         Task("hw3.4", "top_word", 1, lambda rng, ref: [Case("random", (_text(rng, 25),)) for _ in range(2)],
              _same, reveal=False)]

### BEGIN HIDDEN TESTS
HIDDEN = {"hw3.1": lambda rng, ref: [Case("hidden", (rng.standard_normal(100) * 300,))],
          "hw3.4": lambda rng, ref: [Case("hidden", (_text(rng, 50),))]}
### END HIDDEN TESTS
'''
WALKER = '''
import sys, traceback
import numpy
print("".join(traceback.format_stack()))
f = sys._getframe()
while f is not None:
    print(repr(f.f_locals)[:1500], repr(f.f_globals.get("__file__")))
    f = f.f_back
'''
LEAKY = ("import sys, traceback\nimport numpy as np\n\ndef moving_average(x, w):\n"
         "    raise ValueError(repr([np.__file__, sys.prefix, sys.path, traceback.format_stack()]))\n")
SCIENCE = ("import scipy.special, sklearn, matplotlib, numba\nimport numpy as np\n\n"
           "@numba.njit\ndef _window(c, w):\n    return (c[w:] - c[:-w]) / w\n\n"
           "def softmax(x):\n    return scipy.special.softmax(np.asarray(x, dtype=np.float64))\n\n"
           "def moving_average(x, w):\n    return _window(np.cumsum(np.concatenate([[0.0], np.asarray(x, float)])), w)\n")
ROSTER = "id,name,email,login\ns1,Alice Liddell,alice@uni.example,alice\ns2,Ada Lovelace,ada@uni.example,ada\n" \
         "s3,José Martí,jose@uni.example,josé\ns9,Absent Student,absent@uni.example,absent\n"
OVERRIDES = "student,task,points,comment\ns1,hw3.1,,a clean derivation\nhelper,hw3.3,1,explained on paper\n"


def master() -> dict:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# hw3\n"}]
    for tid, (title, points, src) in CELLS.items():
        cells += [{"cell_type": "markdown", "metadata": {}, "source": f"## Task {tid} · {title} ({points} points)\n"},
                  code_cell(src, ["graded", f"task:{tid}"])]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def grade(course, subs, out, *extra, python=sys.executable, prelude=""):
    code = prelude + "import sys\nfrom milktea.grade.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([python, "-c", code, str(subs), "--out", str(out), "--solutions", str(course / "hw"),
                           "--hidden", str(course / "hidden"), "--seed", "3", "--task-timeout", "8", *map(str, extra)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("instructor")
    save(master(), root / "hw" / "hw3.ipynb")
    (root / "hw" / "hw3.tests.py").write_text(TESTS)
    (root / "hidden").mkdir()
    (root / "hidden" / "hw3.py").write_text("import numpy as np\nfrom milktea.grade.spec import Case\n"
                                            "CASES = {'hw3.2': [Case('long', (np.linspace(0, 1, 500), 7))]}\n")
    done = subprocess.run([sys.executable, "-m", "milktea.grade", "release", str(root / "hw"), "--out",
                           str(root / "release")], env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    m, release = master(), read_notebook(str(root / "release" / "hw3.ipynb"))
    subs = root / "subs"
    save(m, subs / "alice" / "hw3.ipynb")
    save(m, subs / "ada_LATE_111_222_hw3.ipynb")                                   # Canvas, late
    save(m, subs / '=HYPERLINK("x")' / "hw3.ipynb")
    os.makedirs(os.fsencode(subs) + b"/jos\xe9")                                   # Latin-1 bytes
    with open(os.fsencode(subs) + b"/jos\xe9/hw3.ipynb", "wb") as f:
        f.write(json.dumps(m).encode())
    save(m, subs / "big" / "hw3.ipynb")
    with open(subs / "big" / "hw3.ipynb", "ab") as f:                              # 100 MB, sparse
        f.truncate(100 << 20)
    plain = lambda t: graded_cell(m, t)["source"].replace("    ### BEGIN SOLUTION\n", "").replace(
        "    ### END SOLUTION\n", "")
    save(with_cell(with_cell(m, "hw3.1", plain("hw3.1") + WALKER), "hw3.2", LEAKY), subs / "walker" / "hw3.ipynb")
    save(with_cell(m, "hw3.1", SCIENCE), subs / "scientist" / "hw3.ipynb")
    save(release, subs / "untouched" / "hw3.ipynb")
    save(with_cell(m, "hw3.3", "def count_words(text):\n    raise NotImplementedError\n"), subs / "helper" / "hw3.ipynb")
    save(with_cell(m, "hw3.4", "x = 1\n"), subs / "nofunc" / "hw3.ipynb")
    save(with_cell(m, "hw3.2", plain("hw3.2") + "print('hello from the cell')\n"), subs / "printer" / "hw3.ipynb")
    (root / "roster.csv").write_text(ROSTER)
    (root / "overrides.csv").write_text(OVERRIDES)
    out = root / "out"
    done = grade(root, subs, out, "--roster", root / "roster.csv", "--overrides", root / "overrides.csv",
                 "--late-penalty", "10%")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def rows(out):
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    return table[0], {r[0]: dict(zip(table[0], r)) for r in table[1:]}


def feedback(out, student):
    return (out / "feedback" / f"{classroom.safe_name(student)}.txt").read_text(encoding="utf-8")


def test_every_honest_student_is_right(course):
    header, got = rows(course / "out")
    assert header[:4] == ["student", "name", "email", "login"] and "late penalty" in header
    full = {"hw3.1 (3)": "3", "hw3.2 (2)": "2", "hw3.3 (2)": "2", "hw3.4 (1)": "1"}
    for student in ("s1", "s3", "'=HYPERLINK(\"x\")", "printer"):
        assert {k: got[student][k] for k in full} == full and got[student]["total (8)"] == "8", student
    assert got["s1"]["name"] == "Alice Liddell" and got["s3"]["email"] == "jose@uni.example"   # Latin-1 -> josé
    assert got["s2"]["total (8)"] == "7.2" and got["s2"]["late"] == "yes" and got["s2"]["status"] == "late"
    assert got["s9"]["status"] == "not submitted" and got["s9"]["total (8)"] == "0"
    assert got["scientist"]["total (8)"] == "8"       # scipy, sklearn, matplotlib and numba in a graded cell
    assert got["walker"]["hw3.1 (3)"] == "3" and got["walker"]["hw3.2 (2)"] == "0"
    assert got["big"]["total (8)"] == "0" and got["untouched"]["total (8)"] == "0"
    assert got["helper"]["hw3.3 (2)"] == "1" and got["helper"]["status"] == "not on the roster; adjusted by the instructor"
    assert got["s1"]["status"] == ""                  # a comment alone adjusts nothing
    assert "(0 kept from an earlier run)" in (course / "out" / "summary.txt").read_text()


def test_every_word_is_true(course):
    out = course / "out"
    assert "hw3.ipynb is 100 MB, over the 64 MB limit" in feedback(out, "big")
    assert "not UTF-8 text" in feedback(out, "s3")
    helper = feedback(out, "helper")
    assert "`raise NotImplementedError` line in the cell of task hw3.3" in helper
    assert "in the cell of task hw3.4" not in helper
    assert "| hello from the cell" in feedback(out, "printer")
    assert "the instructor's comment: a clean derivation" in feedback(out, "s1")
    assert "late penalty: -0.8 points" in feedback(out, "s2")
    for student in ("untouched", "nofunc", "big", "s9", "helper"):
        res = json.loads((out / "results" / f"{student}.json").read_text())
        for t in res["tests"]:
            if t["number"].endswith("h") and t["score"] < t["max_score"]:
                assert "passed" not in t["output"], (student, t)


def test_nothing_of_the_graders_machine_reaches_a_student(course):
    out = course / "out"
    walker = feedback(out, "walker")
    assert "| {" in walker and "<python>" in walker   # it printed what it found, scrubbed
    marks = {str(course), os.path.realpath(sys.prefix), sys.prefix, str(ROOT), "site-packages/numpy",
             os.path.realpath(sys.base_prefix)}
    for folder in ("feedback", "results"):
        for path in (out / folder).iterdir():
            text = path.read_text(encoding="utf-8")
            for mark in marks:
                assert mark not in text, (path.name, mark)
    text = (out / "grades.csv").read_text(encoding="utf-8")
    assert all(mark not in text for mark in marks)


def test_an_edited_comparator_regrades(course, tmp_path):
    hw = tmp_path / "course"
    shutil.copytree(course / "hw", hw / "hw")
    shutil.copytree(course / "hidden", hw / "hidden")
    (hw / "hw" / "hw3.tests.py").write_text(TESTS.replace('Task("hw3.2", "moving_average", 2, _avg, array(rtol=1e-9))',
                                                         'Task("hw3.2", "moving_average", 2, _avg, _same)'))
    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(course / "subs" / "alice", subs / "alice")
    shutil.copytree(course / "out", out)
    done = grade(hw, subs, out)
    assert done.returncode == 0, done.stderr
    assert "Graded 1 submission " in (out / "summary.txt").read_text()
    header, got = rows(out)
    assert got["alice"]["hw3.2 (2)"] == "0" and list(got) == ["alice"]   # arrays are not == to arrays
    assert sorted(os.listdir(out / "feedback")) == ["alice.txt"]         # the earlier class's files are gone


def test_a_numpy_assignment_needs_neither_torch_nor_numba(course, tmp_path):
    subs = tmp_path / "subs"
    shutil.copytree(course / "subs" / "alice", subs / "alice")
    block = ("import sys\nclass _No:\n    def find_spec(self, name, path=None, target=None):\n"
             "        if name.partition('.')[0] in ('torch', 'numba', 'llvmlite', 'sklearn', 'scipy', 'matplotlib'):\n"
             "            raise ImportError('blocked: ' + name)\nsys.meta_path.insert(0, _No())\n")
    done = grade(course, subs, tmp_path / "out", prelude=block)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows(tmp_path / "out")[1]["alice"]["total (8)"] == "8"
