"""The course's student release, built into an empty folder, holds no solution code, and every
public check in it runs where the solutions cannot be reached: in a bubblewrap world that holds
Python, a copy of the milktea package and the release, nothing else (no checkout, no solutions/)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _grade_helpers import CHAPTERS, ROOT, SOLUTIONS, graded_cell, save, with_cell
from milktea.grade import isolation
from milktea.grade.notebook import cell_tasks, read_notebook
from milktea.grade.release import BEGIN, END

pytestmark = pytest.mark.skipif(not isolation.probe().isolated, reason="needs a sandbox (bubblewrap)")


def _solution_lines(nb: dict) -> set:
    """Every line of code between the solution markers of a master notebook (long enough to be telling)."""
    lines, inside = set(), False
    for cell in nb["cells"]:
        for line in cell["source"].splitlines():
            mark = line.strip()
            if mark in (BEGIN, END):
                inside = mark == BEGIN
            elif inside and len(mark) > 12:
                lines.add(mark)
    return lines


def _world(release: Path, package: Path, argv: list) -> subprocess.CompletedProcess:
    """Run argv with /release as the working folder and /pkg on PYTHONPATH, in a sandbox."""
    cmd = isolation.command(argv, isolation.probe(), tmp_mb=256)
    at = cmd.index("--")
    cmd[at:at] = ["--ro-bind", str(release), "/release", "--ro-bind", str(package), "/pkg", "--chdir", "/release"]
    env = {"PATH": os.defpath, "PYTHONPATH": "/pkg", "HOME": "/tmp", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    out = root / "release"
    done = subprocess.run([sys.executable, "-m", "milktea.grade", "release", str(SOLUTIONS), "--out", str(out)],
                          cwd=root, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    package = root / "pkg"
    shutil.copytree(ROOT / "milktea", package / "milktea", ignore=shutil.ignore_patterns("__pycache__"))
    return root, out, package


def test_the_release_holds_the_notebooks_and_checks_and_no_solution(release):
    _, out, _ = release
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted([f"{ch}.ipynb" for ch in CHAPTERS] + [f"{ch}.checks.json" for ch in CHAPTERS]
                           + [f"zh/{ch}.ipynb" for ch in CHAPTERS])
    # what a release ships as code: the notebooks' code cells and the checks files, whole
    text = {f: "\n".join(c["source"] for c in read_notebook(str(out / f))["cells"] if c["cell_type"] == "code")
            if f.endswith(".ipynb") else (out / f).read_text(encoding="utf-8") for f in files}
    for ch in CHAPTERS:
        master = read_notebook(str(SOLUTIONS / f"{ch}.ipynb"))
        secret = _solution_lines(master)
        assert secret, ch
        for name, body in text.items():
            leaked = [line for line in secret if line in body]
            assert not leaked, (name, leaked[:3])
        hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", (SOLUTIONS / f"{ch}.tests.py").read_text(),
                           re.S).group(1)
        assert "HIDDEN = {" in hidden and "HIDDEN = {" not in text[f"{ch}.checks.json"]


def test_every_public_check_runs_where_the_solutions_cannot_be_reached(release):
    # about 15 s: 12 notebooks (both editions of six chapters, torch for one) checked in 3 sandboxes
    root, release_dir, package = release
    # the answers go into a copy: the release itself stays as built for the other test, in any order
    out = root / "world"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(release_dir, out)
    for path in [root, out, package, *out.rglob("*"), *package.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)   # the world's user is not the test's
    for ch in CHAPTERS:   # each learner's notebook: the release's, every graded cell answered
        for sub in ("", "zh/"):
            student = read_notebook(str(out / f"{sub}{ch}.ipynb"))
            master = read_notebook(str(SOLUTIONS / f"{sub}{ch}.ipynb"))
            for task in [t for c in student["cells"] for t in cell_tasks(c)]:
                student = with_cell(student, task, graded_cell(master, task)["source"])
            save(student, out / f"{sub}answers" / f"{ch}.ipynb")
    for path in out.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    probe = _world(out, package, [sys.executable, "-c", f"import os; print(os.path.exists({str(SOLUTIONS)!r}), "
                                                        f"sorted(os.listdir('/release')))"])
    assert probe.stdout.startswith("False"), probe.stdout + probe.stderr   # no solutions/ in this world
    answered = [f"answers/{ch}.ipynb" for ch in CHAPTERS] + [f"zh/answers/{ch}.ipynb" for ch in CHAPTERS]
    done = _world(out, package, [sys.executable, "-m", "milktea.grade.check", *answered])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("Public tests passed: ") == len(CHAPTERS), done.stdout
    assert done.stdout.count("公开测试全部通过") == len(CHAPTERS), done.stdout
    todo = _world(out, package, [sys.executable, "-m", "milktea.grade.check", "03_topk.ipynb", "zh/03_topk.ipynb"])
    assert todo.returncode == 1 and "not implemented yet" in todo.stdout and "尚未实现" in todo.stdout, todo.stderr
