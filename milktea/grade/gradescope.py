"""Gradescope: build an autograder bundle, and grade one submission inside it.

    python -m milktea.grade gradescope --out BUNDLE [--solutions solutions] [--hidden DIR]
                                       [--chapter 03_topk] [--trust-submissions]

writes BUNDLE/ and BUNDLE.zip with Gradescope's two entry points at the top:
  setup.sh        run once as root when Gradescope builds the image: installs bubblewrap
                  and a virtualenv with the course's dependencies;
  run_autograder  run for every submission: grades /autograder/submission into
                  /autograder/results/results.json (score, tests[{name, score, max_score,
                  output, visibility, status}], stdout_visibility ...).
The solutions and hidden tests travel in source/; student code runs in the same sandbox as
in a class run (isolation.py), so it never sees them. Where the image can't build one, the
bundle refuses (the results say why) unless it was built with --trust-submissions.
MILKTEA_AUTOGRADER_ROOT (default /autograder) and MILKTEA_AUTOGRADER_PYTHON move the
layout, for testing the bundle on a normal machine.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import stat
import sys
import time

from . import isolation
from .classroom import _record, refusal
from .evaluate import failed_all, grade_notebook
from .notebook import atomic_write
from . import assignment as assignments_
from .prepare import SetupError, check_hidden_dir, prepare
from .sandbox import Limits
from .submissions import scan_folder

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the milktea package

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq bubblewrap python3 python3-venv python3-pip >/dev/null
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q --extra-index-url https://download.pytorch.org/whl/cpu /autograder/source/src
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes results/results.json.
set -uo pipefail
ROOT="${MILKTEA_AUTOGRADER_ROOT:-/autograder}"
PY="${MILKTEA_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
mkdir -p "$ROOT/results"
cd "$ROOT/source"
PYTHONPATH="$ROOT/source/src" exec "$PY" -m milktea.grade.gradescope run --root "$ROOT"
"""


def build(out: str, solutions: str = "solutions", hidden: str | None = None, chapters=None,
          trust: bool = False, limits: Limits = Limits(), seed: int | None = None) -> str:
    """Write the bundle folder `out` and `out`.zip; returns the zip's path."""
    found = assignments_.find(solutions, chapters)
    chapters = list(found)
    hidden_files = check_hidden_dir(hidden, assignments_.names(solutions))
    seed = secrets.randbelow(10**9) if seed is None else seed
    for ch in chapters:
        prepare(found[ch], seed, hidden_files.get(ch))   # fails now, not on Gradescope, if something is wrong
    if os.path.exists(out):
        shutil.rmtree(out)
    src = os.path.join(out, "src")
    shutil.copytree(PACKAGE, os.path.join(src, "milktea"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):   # setup.sh pip-installs src/ for the dependencies
        if os.path.exists(os.path.join(os.path.dirname(PACKAGE), name)):
            shutil.copy(os.path.join(os.path.dirname(PACKAGE), name), src)
    os.makedirs(os.path.join(out, "solutions"))
    for ch in chapters:
        a = found[ch]
        shutil.copy(a.master, os.path.join(out, "solutions"))
        shutil.copy(a.tests, os.path.join(out, "solutions"))
        for lang in a.notebooks:
            if lang != a.lang:
                os.makedirs(os.path.join(out, "solutions", lang), exist_ok=True)
                shutil.copy(os.path.join(os.path.dirname(a.master), lang, ch + ".ipynb"),
                            os.path.join(out, "solutions", lang))
        if ch in hidden_files:
            os.makedirs(os.path.join(out, "hidden"), exist_ok=True)
            shutil.copy(hidden_files[ch], os.path.join(out, "hidden"))
    config = {"chapters": chapters, "trust": trust, "limits": limits.__dict__, "seed": seed}
    atomic_write(os.path.join(out, "config.json"), json.dumps(config, indent=1) + "\n")
    for name, text in (("setup.sh", SETUP), ("run_autograder", RUN)):
        path = os.path.join(out, name)
        atomic_write(path, text)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shutil.make_archive(out, "zip", out)


def results(root: str, box=None) -> dict:
    """Grade root/submission with the bundle in root/source; the results.json data."""
    source = os.path.join(root, "source")
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    limits = Limits(**config["limits"])
    box = isolation.probe() if box is None else box
    if not box.isolated and not config.get("trust"):
        return {"score": 0.0, "output": "The autograder could not run: " + refusal(box),
                "stdout_visibility": "hidden", "tests": []}
    hidden = os.path.join(source, "hidden")
    hidden = hidden if os.path.isdir(hidden) else None
    chapters = config["chapters"]
    found = assignments_.find(os.path.join(source, "solutions"), chapters)
    hidden_files = check_hidden_dir(hidden, found)
    student = scan_folder(os.path.join(root, "submission"), chapters, chapters[0] if len(chapters) == 1 else None)
    start, out = time.monotonic(), []
    for ch in chapters:
        prepared = prepare(found[ch], config["seed"], hidden_files.get(ch))
        sub = student.files.get(ch) or (student.files.get(None) if len(chapters) == 1 else None)
        if sub is None:
            out.append(failed_all(prepared, "", "not_submitted", f"no notebook for {ch} was found in the submission "
                                                                 f"(upload {ch}.ipynb)"))
        elif sub.nb is None:
            out.append(failed_all(prepared, sub.shown, "malformed", sub.error))
        else:
            out.append(grade_notebook(sub.shown, prepared, limits, (), box if box.isolated else None, sub.nb))
    if out:
        out[0].notes[:0] = student.notes
    rec = _record("submission", out, "")
    for t in rec["tests"]:
        t["number"] = t["name"].split()[0]
    notes = [n for r in out for n in r.notes]
    rec["output"] = "\n".join([rec["output"]] + [f"note: {n}" for n in notes]
                              + ([] if box.isolated else [f"(not isolated: {box.why})"]))
    rec["execution_time"] = round(time.monotonic() - start, 2)
    rec["extra_data"] = {"isolated": box.isolated, "seed": config["seed"]}
    return rec


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:            # what run_autograder calls, on Gradescope
        r = argparse.ArgumentParser(prog="python -m milktea.grade.gradescope run")
        r.add_argument("--root", default=os.environ.get("MILKTEA_AUTOGRADER_ROOT", "/autograder"))
        return run(r.parse_args(argv[1:]).root)
    ap = argparse.ArgumentParser(prog="python -m milktea.grade gradescope",
                                 description="Build a Gradescope autograder bundle (BUNDLE/ and BUNDLE.zip).")
    ap.add_argument("--out", required=True, help="bundle folder to write; BUNDLE.zip is what you upload")
    ap.add_argument("--solutions", default="solutions", help="folder of the reference notebooks (default: solutions)")
    ap.add_argument("--hidden", help="folder of hidden tests: <exercise>.py files defining CASES")
    ap.add_argument("--assignment", "--chapter", dest="chapter", action="append",
                    help="an assignment in --solutions to include (repeat for several; default: all)")
    ap.add_argument("--seed", type=int, help="seed of the random cases, the same for every submission "
                                             "(default: drawn once now; recorded in each results.json)")
    ap.add_argument("--trust-submissions", action="store_true",
                    help="grade even where the image can't isolate student code (results say so)")
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
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: upload it as the assignment's autograder on Gradescope")
    return 0


def run(root: str) -> int:
    try:
        data = results(root)
    except Exception as e:   # Gradescope shows results.json; a traceback alone helps nobody
        data = {"score": 0.0, "output": f"The autograder failed: {type(e).__name__}: {e}", "tests": [],
                "stdout_visibility": "hidden"}
    os.makedirs(os.path.join(root, "results"), exist_ok=True)
    atomic_write(os.path.join(root, "results", "results.json"), json.dumps(data, indent=1) + "\n")
    print(data.get("output", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
