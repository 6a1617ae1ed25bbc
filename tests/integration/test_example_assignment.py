"""The example assignment (examples/assignment), graded end to end as an instructor would:
release it, let three students fill the release in, grade the class, then build the Gradescope
bundle and run it on one submission in a fake /autograder layout. No library file is edited."""
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared helpers
from _grade_helpers import ROOT, graded_cell, save, with_cell  # noqa: E402
from milktea.grade import isolation  # noqa: E402
from milktea.grade.notebook import read_notebook  # noqa: E402

EXAMPLE = ROOT / "examples" / "assignment"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
pytestmark = pytest.mark.skipif(not isolation.probe().isolated, reason="needs a sandbox (bubblewrap)")


def cli(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "milktea.grade", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The instructor's folder (a copy of the example), its release, and three students' work."""
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
    save(full, root / "subs" / "ada" / "norms.ipynb")
    wrong_ring = with_cell(full, "hw.3", "def ring_steps(workers):\n    return workers - 1\n")
    save(wrong_ring, root / "subs" / "ben" / "norms.ipynb")
    save(student, root / "subs" / "cy" / "norms.ipynb")            # handed in untouched
    return root


def test_the_release_holds_no_solution_and_its_checks_work(course):
    release = course / "release"
    assert sorted(p.name for p in release.iterdir()) == ["norms.checks.json", "norms.ipynb"]
    text = "".join(p.read_text() for p in release.iterdir())
    for secret in ("BEGIN SOLUTION", "np.sqrt(sum(", "2 * (workers - 1)", "HIDDEN = ", "one machine: nothing"):
        assert secret not in text, secret
    checks = json.loads((release / "norms.checks.json").read_text())
    ring = next(t for t in checks["tasks"] if t["id"] == "hw.3")
    assert all("hash" in c and "expected" not in c for c in ring["cases"])   # reveal=False: hashes only
    done = subprocess.run([sys.executable, "-m", "milktea.grade.check", "../subs/ben/norms.ipynb"],
                          cwd=release, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "hw.3 Steps of a ring" in done.stdout, done.stdout + done.stderr
    assert "not the expected answer (this task's answers are not shown" in done.stdout
    assert "expected 2, got 1" not in done.stdout


def test_the_class_is_graded(course):
    out = course / "grades"
    done = cli(course / "subs", "--out", out, "--solutions", course / "hw", "--seed", "5", "--task-timeout", "5")
    assert done.returncode == 0, done.stderr
    with open(out / "grades.csv", newline="") as f:
        rows = {r[0]: r[1:] for r in csv.reader(f)}
    assert rows["student"] == ["hw.1 (2)", "hw.2 (2)", "hw.3 (1)", "total (5)"]
    assert rows["ada"] == ["2", "2", "1", "5"] and rows["cy"] == ["0", "0", "0", "0"]
    assert rows["ben"] == ["2", "2", "0.17", "4.17"]   # workers - 1 passes only the hidden case of 1 machine
    ben = (out / "feedback" / "ben.txt").read_text()
    assert "not the expected answer" in ben and "expected 7" not in ben   # reveal=False in feedback too
    assert json.loads((out / "run.json").read_text())["seed"] == 5


def test_the_gradescope_bundle_runs_in_an_autograder_layout(course):
    bundle = course / "bundle"
    done = cli("gradescope", "--out", bundle, "--solutions", course / "hw", "--seed", "9")
    assert done.returncode == 0, done.stderr
    root = course / "autograder"
    with zipfile.ZipFile(str(bundle) + ".zip") as z:
        z.extractall(root / "source")
    assert (root / "source" / "solutions" / "norms.tests.py").exists()
    shutil.copytree(course / "subs" / "ben", root / "submission")
    env = {"PATH": os.environ["PATH"], "MILKTEA_AUTOGRADER_ROOT": str(root), "MILKTEA_AUTOGRADER_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    res = json.loads((root / "results" / "results.json").read_text())
    assert res["score"] == 4.17 and res["extra_data"]["seed"] == 9
    assert [(t["name"].split()[0], t["score"], t["max_score"]) for t in res["tests"]] == \
        [("hw.1", 2, 2), ("hw.2", 2, 2), ("hw.3", 0.17, 1)]
