"""Gradescope: build an autograder bundle (autograder.py grades with it, inside Gradescope).

    python -m milktea.grade gradescope --out BUNDLE [--solutions solutions] [--hidden DIR]
                                       [--assignment 03_topk] [--seed N] [--trust-submissions]

writes BUNDLE/ and BUNDLE.zip with Gradescope's two entry points at the top:
  setup.sh        run once as root when Gradescope builds the image: installs bubblewrap and a
                  virtualenv with the course's dependencies, then runs the sandbox self-test
                  (the build fails if the sandbox can't be built there);
  run_autograder  run for every submission: grades /autograder/submission into
                  /autograder/results/results.json (score, tests[{name, score, max_score,
                  output, visibility, status}], ...).
The master notebooks, their tests and the hidden tests travel in the bundle; student code runs
in the same sandbox as in a class run (isolation.py), so it never sees them. The seed of the
random cases is fixed when the bundle is built, so every submission meets the same cases.

BUNDLE is written beside itself, then moved into place; an existing BUNDLE is replaced only if
it is a bundle this command made (it holds the marker file, which lists the files the build
wrote), and BUNDLE.zip likewise: any other file in BUNDLE (an instructor's notes) is kept, and
the earlier bundle's seed too unless --seed is given. `requirements.txt` is what setup.sh
installs: numpy, and what the assignments import; torch only when one of them does.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import secrets
import shutil
import stat
import sys
import zipfile

from . import assignment as assignments_
from .limits import Limits
from . import outdir
from .notebook import atomic_write, cell_tasks
from .prepare import SetupError, check_hidden_dir, prepare

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the milktea package
MARKER = ".milktea-gradescope-bundle"

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq bubblewrap util-linux python3 python3-venv python3-pip >/dev/null
python3 -m venv /autograder/venv
# the grader itself needs numpy alone (it runs from source/src); the rest is what the assignments
# import (found in their masters and tests files, plus --pip): requirements.txt
/autograder/venv/bin/pip install -q {index}-r /autograder/source/requirements.txt
# The sandbox must work in this image: if it can't, the build fails here (with what to do),
# not every student's grade later.
cd /autograder/source
PYTHONPATH=/autograder/source/src /autograder/venv/bin/python -m milktea.grade.autograder selftest --root /autograder
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes results/results.json, or exits
# non-zero (no score recorded) when the sandbox or the grader fails: the reason is on stdout.
set -uo pipefail
ROOT="${MILKTEA_AUTOGRADER_ROOT:-/autograder}"
PY="${MILKTEA_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
mkdir -p "$ROOT/results"
cd "$ROOT/source"
PYTHONPATH="$ROOT/source/src" exec "$PY" -m milktea.grade.autograder run --root "$ROOT"
"""


def _ours_folder(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path) and os.path.isfile(os.path.join(path, MARKER))


def _ours_zip(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return MARKER in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def check_out(out: str, inputs: dict | None = None) -> None:
    """Refuse an --out that lies inside the inputs or holds anything this command did not make
    (an earlier bundle may hold the instructor's own files too: they are kept)."""
    outdir.check(out, inputs or {})
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.listdir(out)) and not _ours_folder(out):
        raise SetupError(f"--out {out} already exists and is not a bundle this command made (no {MARKER} in it): "
                         "nothing was written or deleted; choose a new folder")
    if os.path.lexists(out + ".zip") and not _ours_zip(out + ".zip"):
        raise SetupError(f"{out}.zip already exists and is not a bundle this command made: nothing was written "
                         "or deleted; move it away or choose another --out")


def _write(folder: str, found: dict, hidden_files: dict, config: dict):
    src = os.path.join(folder, "src")
    shutil.copytree(PACKAGE, os.path.join(src, "milktea"), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):   # setup.sh pip-installs src/ for the dependencies
        if os.path.exists(os.path.join(os.path.dirname(PACKAGE), name)):
            shutil.copy(os.path.join(os.path.dirname(PACKAGE), name), src)
    os.makedirs(os.path.join(folder, "solutions"))
    for ch, a in found.items():
        shutil.copy(a.master, os.path.join(folder, "solutions"))
        shutil.copy(a.tests, os.path.join(folder, "solutions"))
        for lang in a.notebooks:
            if lang != a.lang:
                os.makedirs(os.path.join(folder, "solutions", lang), exist_ok=True)
                shutil.copy(os.path.join(os.path.dirname(a.master), lang, ch + ".ipynb"),
                            os.path.join(folder, "solutions", lang))
        if ch in hidden_files:
            os.makedirs(os.path.join(folder, "hidden"), exist_ok=True)
            shutil.copy(hidden_files[ch], os.path.join(folder, "hidden"))
    atomic_write(os.path.join(folder, "config.json"), json.dumps(config, indent=1) + "\n")
    atomic_write(os.path.join(folder, "requirements.txt"), "\n".join(requirements(found, config.get("pip", ()))) + "\n")
    index = "--extra-index-url https://download.pytorch.org/whl/cpu " if "torch" in requirements(found, ()) else ""
    for name, text in (("setup.sh", SETUP.replace("{index}", index)), ("run_autograder", RUN)):
        path = os.path.join(folder, name)
        atomic_write(path, text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    made = _files(folder)
    # the marker lists every file the build wrote: a rebuild replaces those, and keeps any other
    atomic_write(os.path.join(folder, MARKER), "made by python -m milktea.grade gradescope\n"
                 + "".join(f"{m}\n" for m in made + [MARKER]))


# import names whose pip package has another name
PIP_NAMES = {"sklearn": "scikit-learn", "skimage": "scikit-image", "cv2": "opencv-python-headless", "PIL": "pillow",
             "yaml": "pyyaml", "bs4": "beautifulsoup4"}


def requirements(found: dict, extra=()) -> list:
    """What a bundle's venv needs: numpy (the grader's own one need), every top-level module the
    masters' graded cells and the tests files import (not the standard library, not milktea),
    and `extra` (--pip). A numpy assignment gets numpy alone: no torch, numba or scikit-learn.

    >>> requirements({})
    ['numpy']
    """
    names = set()
    for a in found.values():
        sources = [a.source] + [c["source"] for nb in a.notebooks.values() for c in nb["cells"] if cell_tasks(c)]
        for src in sources:
            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(n.name.partition(".")[0] for n in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.partition(".")[0])
    names -= set(sys.stdlib_module_names) | {"milktea", "numpy", "__future__"}
    return ["numpy"] + sorted(PIP_NAMES.get(n, n) for n in names) + [p for p in extra if p]


def _seed_of(out: str):
    """The seed of an earlier bundle in `out` (kept on a rebuild unless --seed is given)."""
    try:
        with open(os.path.join(out, "config.json")) as f:
            seed = json.load(f).get("seed")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    except (OSError, ValueError, AttributeError):
        return None


def _files(folder: str) -> list:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _s, names in os.walk(folder) for n in names)


def _theirs(out: str, new: list) -> list:
    """Files in an earlier bundle folder that its build did not write (the instructor's own). A
    bundle made before the marker listed its files: what a build writes is taken for its own."""
    with open(os.path.join(out, MARKER), encoding="utf-8", errors="replace") as f:
        made = set(f.read().splitlines()[1:])
    if not made:
        made = set(new) | {p for p in _files(out) if p.split("/")[0] in ("src", "solutions", "hidden")}
    return [p for p in _files(out) if p not in made and p != MARKER]


def build(out: str, solutions: str = "solutions", hidden: str | None = None, chapters=None,
          trust: bool = False, limits: Limits = Limits(), seed: int | None = None, pip=()) -> str:
    """Write the bundle folder `out` and `out`.zip; returns the zip's path. A rebuild keeps the
    earlier bundle's seed (unless `seed` is given) and every file in it the build did not write."""
    out = os.path.normpath(out)
    check_out(out, {"--solutions": solutions, "--hidden": hidden})
    found = assignments_.find(solutions, chapters)
    hidden_files = check_hidden_dir(hidden, assignments_.names(solutions))
    earlier = _ours_folder(out)
    seed = seed if seed is not None else (_seed_of(out) if earlier else None)
    seed = secrets.randbelow(10**9) if seed is None else seed
    for ch, a in found.items():
        prepare(a, seed, hidden_files.get(ch))   # fails now, not on Gradescope, if something is wrong
    config = {"chapters": list(found), "trust": trust, "limits": limits.__dict__, "seed": seed, "pip": list(pip)}
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        os.makedirs(tmp)
        _write(tmp, found, {ch: hidden_files[ch] for ch in found if ch in hidden_files}, config)
        archive = shutil.make_archive(tmp, "zip", tmp)
        theirs = _theirs(out, _files(tmp)) if earlier else []
        clash = [p for p in theirs if os.path.lexists(os.path.join(tmp, p))]
        if clash:
            raise SetupError(f"{os.path.join(out, clash[0])} is yours, and the new bundle writes a file of that "
                             "name: move it away (nothing was written or deleted)")
        for rel in theirs:   # the instructor's own files move into the new bundle folder
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)) or tmp, exist_ok=True)
            shutil.copy2(os.path.join(out, rel), os.path.join(tmp, rel), follow_symlinks=False)
        old = None
        if earlier:   # the earlier bundle steps aside until the new one is in place
            old = f"{out}.old-{os.getpid()}"
            os.replace(out, old)
        elif os.path.isdir(out):
            os.rmdir(out)   # empty: checked above
        os.replace(tmp, out)
        os.replace(archive, out + ".zip")
        if old:
            shutil.rmtree(old)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
        if os.path.exists(tmp + ".zip"):
            os.remove(tmp + ".zip")
    return out + ".zip"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="python -m milktea.grade gradescope",
                                 description="Build a Gradescope autograder bundle (BUNDLE/ and BUNDLE.zip).")
    ap.add_argument("--out", required=True, help="bundle folder to write (new, empty, or an earlier bundle); "
                                                 "BUNDLE.zip is what you upload")
    ap.add_argument("--solutions", default="solutions",
                    help="folder of master notebooks, each with NAME.tests.py beside it (default: solutions)")
    ap.add_argument("--hidden", help="folder of extra hidden tests: <assignment>.py files defining CASES")
    ap.add_argument("--assignment", "--chapter", dest="chapter", action="append",
                    help="an assignment in --solutions to include (repeat for several; default: all)")
    ap.add_argument("--seed", type=int, help="seed of the random cases, the same for every submission "
                                             "(default: drawn once now; recorded in each results.json)")
    ap.add_argument("--pip", action="append", default=[], metavar="PACKAGE",
                    help="a package for the bundle's venv beyond what the assignments import (repeat for several)")
    ap.add_argument("--trust-submissions", action="store_true",
                    help="where the image can't build a sandbox, grade anyway with resource limits only "
                         "(the self-test warns, the instructor's log says so)")
    ap.add_argument("--task-timeout", type=float, default=10.0, help="CPU seconds per task and per graded cell (10)")
    ap.add_argument("--submission-timeout", type=float, default=120.0, help="CPU seconds per submission (120)")
    ap.add_argument("--wall-factor", type=float, default=5.0,
                    help="wall-clock limits are this many times the CPU limits: they stop code that waits (5)")
    ap.add_argument("--memory-mb", type=int, default=2048,
                    help="address space (MB) student code may add to Python + numpy (+ torch) (2048)")
    args = ap.parse_args(argv)
    try:
        path = build(args.out, args.solutions, args.hidden, args.chapter, args.trust_submissions,
                     Limits(task_seconds=args.task_timeout, submission_seconds=args.submission_timeout,
                            wall_factor=args.wall_factor, memory_mb=args.memory_mb), args.seed, args.pip)
    except (SetupError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: upload it as the assignment's autograder on Gradescope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
