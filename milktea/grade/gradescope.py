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
it is a bundle this command made (it holds the marker file), and BUNDLE.zip likewise: nothing
else is ever deleted.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import stat
import sys
import zipfile

from . import assignment as assignments_
from .limits import Limits
from .notebook import atomic_write
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
/autograder/venv/bin/pip install -q --extra-index-url https://download.pytorch.org/whl/cpu /autograder/source/src
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


def check_out(out: str) -> None:
    """Refuse an --out that holds anything this command did not make."""
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
    atomic_write(os.path.join(folder, MARKER), "made by python -m milktea.grade gradescope\n")
    for name, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
        path = os.path.join(folder, name)
        atomic_write(path, text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def build(out: str, solutions: str = "solutions", hidden: str | None = None, chapters=None,
          trust: bool = False, limits: Limits = Limits(), seed: int | None = None) -> str:
    """Write the bundle folder `out` and `out`.zip; returns the zip's path."""
    out = os.path.normpath(out)
    check_out(out)
    found = assignments_.find(solutions, chapters)
    hidden_files = check_hidden_dir(hidden, assignments_.names(solutions))
    seed = secrets.randbelow(10**9) if seed is None else seed
    for ch, a in found.items():
        prepare(a, seed, hidden_files.get(ch))   # fails now, not on Gradescope, if something is wrong
    config = {"chapters": list(found), "trust": trust, "limits": limits.__dict__, "seed": seed}
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        os.makedirs(tmp)
        _write(tmp, found, {ch: hidden_files[ch] for ch in found if ch in hidden_files}, config)
        archive = shutil.make_archive(tmp, "zip", tmp)
        old = None
        if _ours_folder(out):   # the earlier bundle steps aside until the new one is in place
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
                            wall_factor=args.wall_factor, memory_mb=args.memory_mb), args.seed)
    except (SetupError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: upload it as the assignment's autograder on Gradescope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
