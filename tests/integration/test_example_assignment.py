"""The example assignment (examples/assignment), graded end to end as an instructor would:
release it, collect a class from an LMS download (a Canvas flat file, a Moodle folder, a .py
file, a .zip upload, one student absent), grade it with a roster and an overrides file at two
stages of the course, then build the Gradescope bundle, self-test it and run it on one
submission in a fake /autograder layout. No library file is edited. About 20 s in all."""
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from _grade_helpers import ROOT, graded_cell, save, with_cell
from milktea.grade import isolation
from milktea.grade.notebook import notebook_text, read_notebook
from milktea.grade.report import task_scores

EXAMPLE = ROOT / "examples" / "assignment"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
pytestmark = pytest.mark.skipif(not isolation.probe().isolated, reason="needs a sandbox (bubblewrap)")
ROSTER = """id,name,email,login
s01,Ada Lovelace,ada@uni.example,ada
s02,Ben Okafor,ben@uni.example,okaforben
s03,Cy Young,cy@uni.example,
s04,Dee Absent,dee@uni.example,dee
s05,Fay Lin,fay@uni.example,fay
s06,Eve Adams,eve@uni.example,eve
"""
OVERRIDES = """student,task,points,comment
s03,hw.1,1.5,explained the idea on paper in class
s01,hw.3,,a neat one-liner
"""
# truncates long gradients: right on the small public cases, wrong on the hidden ones (thousands of entries)
TRUNCATING = ("import numpy as np\n\ndef global_norm(grads):\n"
              "    return float(np.sqrt(sum(float(np.sum(np.square(g.ravel()[:1000]))) for g in grads)))\n")


def cli(*args, timeout=300, env=ENV):
    return subprocess.run([sys.executable, "-m", "milktea.grade", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The instructor's folder (a copy of the example), its release, and a class's download."""
    root = tmp_path_factory.mktemp("example")
    shutil.copytree(EXAMPLE, root / "hw")
    done = cli("release", root / "hw", "--out", root / "release")
    assert done.returncode == 0, done.stderr
    master = read_notebook(str(root / "hw" / "norms.ipynb"))
    student = read_notebook(str(root / "release" / "norms.ipynb"))
    answers = {t: graded_cell(master, t)["source"] for t in ("hw.1", "hw.2", "hw.3")}
    full = student
    for task, source in answers.items():
        full = with_cell(full, task, source)
    subs = root / "subs"
    save(full, subs / "ada" / "norms.ipynb")
    wrong_ring = with_cell(full, "hw.3", "def ring_steps(workers):\n    return workers - 1\n")
    save(wrong_ring, subs / "okaforben_LATE_2002_90017_norms.ipynb")                      # Canvas, flat
    save(student, subs / "Cy Young_3003_assignsubmission_file_" / "norms.ipynb")          # Moodle, untouched
    (subs / "eve").mkdir()
    (subs / "eve" / "norms.py").write_text("\n\n".join([TRUNCATING] + [answers["hw.2"], answers["hw.3"]]))
    with zipfile.ZipFile(subs / "fay.zip", "w") as z:                                      # a zip upload
        z.writestr("homework/norms.ipynb", notebook_text(full))
        z.writestr("homework/notes.txt", "my notes")
    save(full, subs / "zed" / "norms.ipynb")                                               # not on the roster
    (root / "roster.csv").write_text(ROSTER)
    (root / "overrides.csv").write_text(OVERRIDES)
    return root


def _table(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], {r[0]: r[1:] for r in rows[1:]}


def test_the_release_holds_no_solution_and_its_checks_work(course):
    release = course / "release"
    assert sorted(p.name for p in release.iterdir()) == ["norms.checks.json", "norms.ipynb"]
    text = "".join(p.read_text() for p in release.iterdir())
    for secret in ("BEGIN SOLUTION", "np.sqrt(sum(", "2 * (workers - 1)", "HIDDEN = ", "one machine: nothing"):
        assert secret not in text, secret
    checks = json.loads((release / "norms.checks.json").read_text())
    ring = next(t for t in checks["tasks"] if t["id"] == "hw.3")
    assert all("hash" in c and "expected" not in c for c in ring["cases"])   # reveal=False: hashes only
    ben = course / "subs" / "okaforben_LATE_2002_90017_norms.ipynb"
    done = subprocess.run([sys.executable, "-m", "milktea.grade.check", str(ben), "--checks", "norms.checks.json"],
                          cwd=release, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "hw.3 Steps of a ring" in done.stdout, done.stdout + done.stderr
    assert "not the expected answer (this task's answers are not shown" in done.stdout
    assert "expected 2, got 1" not in done.stdout


def test_the_class_is_graded_with_its_roster_and_overrides(course):
    out = course / "grades"
    args = [course / "subs", "--out", out, "--solutions", course / "hw", "--seed", "5", "--task-timeout", "5",
            "--roster", course / "roster.csv", "--overrides", course / "overrides.csv"]
    done = cli(*args, "--feedback-stage", "before_due_date")
    assert done.returncode == 0, done.stderr
    header, rows = _table(out / "grades.csv")
    assert header[:4] == ["student", "name", "email", "login"]   # the roster's columns
    header, rows = header[:1] + header[4:], {s: r[3:] for s, r in rows.items()}
    assert header == ["student", "hw.1 (2)", "hw.2 (2)", "hw.3 (1)", "total (5)", "status"]
    assert rows["s01"] == ["2", "2", "1", "5", ""]                                  # a comment only: no change
    assert rows["s02"] == ["2", "2", "0.17", "4.17", ""]    # Canvas name -> id; workers - 1 passes only 1 machine
    assert rows["s03"] == ["1.5", "0", "0", "1.5", "adjusted by the instructor"]    # Moodle name -> id; override
    assert rows["s04"] == ["0", "0", "0", "0", "not submitted"]
    assert rows["s05"] == ["2", "2", "1", "5", ""]                                  # the zip's notebook
    assert rows["zed"] == ["2", "2", "1", "5", "not on the roster"]
    eve = float(rows["s06"][0])   # the .py file: the long hidden cases fail (clip calls the same norm)
    assert 0.5 < eve < 2 and 0.5 < float(rows["s06"][1]) < 2 and rows["s06"][2] == "1"
    before = (out / "feedback" / "s06.txt").read_text()
    assert "hidden tests (" in before and "results after the due date" in before and "hidden checks failed" not in before
    assert "a Python file, graded like a notebook" in before
    assert "explained the idea on paper" in (out / "feedback" / "s03.txt").read_text()
    assert "ignored notes.txt" in (out / "feedback" / "s05.txt").read_text() or \
        "homework/notes.txt" in (out / "feedback" / "s05.txt").read_text()
    res = json.loads((out / "results" / "s06.json").read_text())
    vis = {t["name"]: t["visibility"] for t in res["tests"]}
    assert vis["hw.1 The global norm"] == "visible" and vis["hw.1 The global norm (hidden tests)"] == "after_due_date"
    assert vis["hw.3 Steps of a ring (hidden tests)"] == "after_published"
    assert task_scores(res)["hw.1"] == eve and res["extra_data"]["seed"] == 5
    # the next stage: nothing is graded again, the feedback now shows the hidden results
    done = cli(*args, "--feedback-stage", "after_due_date")
    assert done.returncode == 0 and "Graded 0 submissions" in (out / "summary.txt").read_text()
    after = (out / "feedback" / "s06.txt").read_text()
    assert "hidden checks failed" in after and {s: r[3:] for s, r in _table(out / "grades.csv")[1].items()} == rows
    assert json.loads((out / "results" / "s03.json").read_text())["extra_data"]["overrides"] == [
        {"task": "hw.1", "points": 1.5, "comment": "explained the idea on paper in class", "autograder": 0.0}]


def test_the_gradescope_bundle_self_tests_and_runs_in_an_autograder_layout(course):
    bundle = course / "bundle"
    bundle.mkdir()
    (bundle / "notes.md").write_text("mine")          # a folder that is not a bundle: refused, kept
    done = cli("gradescope", "--out", bundle, "--solutions", course / "hw", "--seed", "9")
    assert done.returncode == 2 and "not a bundle this command made" in done.stderr
    assert (bundle / "notes.md").read_text() == "mine" and not (course / "bundle.zip").exists()
    bundle = course / "bundle2"
    for _ in range(2):                                # a second build replaces the first
        done = cli("gradescope", "--out", bundle, "--solutions", course / "hw", "--seed", "9")
        assert done.returncode == 0, done.stderr
    root = course / "autograder"
    with zipfile.ZipFile(str(bundle) + ".zip") as z:
        z.extractall(root / "source")
    assert (root / "source" / "solutions" / "norms.tests.py").exists()
    shutil.copytree(course / "subs" / "eve", root / "submission")
    env = {"PATH": os.environ["PATH"], "MILKTEA_AUTOGRADER_ROOT": str(root), "MILKTEA_AUTOGRADER_PYTHON": sys.executable}
    test = subprocess.run([sys.executable, "-m", "milktea.grade.autograder", "selftest", "--root", str(root)],
                          env={**ENV, **env}, capture_output=True, text=True, timeout=300)
    assert test.returncode == 0 and "self-test passed" in test.stdout, test.stdout + test.stderr
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    res = json.loads((root / "results" / "results.json").read_text())
    scores = task_scores(res)
    assert res["extra_data"]["seed"] == 9 and scores["hw.3"] == 1 and scores["hw.1"] < 2 and scores["hw.2"] < 2
    assert {t["visibility"] for t in res["tests"]} == {"visible", "after_due_date", "after_published"}
    # no sandbox in this image: no score, the reason for the instructor on stdout only
    (root / "results" / "results.json").unlink()
    bare = dict(env, PATH=str(course / "no-bwrap"))
    (course / "no-bwrap").mkdir(exist_ok=True)
    for tool in ("bash", "env", "mkdir", "setpriv"):
        if shutil.which(tool) and not (course / "no-bwrap" / tool).exists():
            (course / "no-bwrap" / tool).symlink_to(shutil.which(tool))
    done = subprocess.run([shutil.which("bash"), str(root / "source" / "run_autograder")], env=bare,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "could not build its sandbox" in done.stdout and "--trust-submissions" in done.stdout
    assert not (root / "results" / "results.json").exists()
