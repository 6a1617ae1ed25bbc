"""Inside Gradescope: grade one submission with a bundle (gradescope.py builds it).

    python -m milktea.grade.autograder run [--root /autograder]        # run_autograder calls this
    python -m milktea.grade.autograder selftest [--root /autograder]   # setup.sh calls this

`run` grades /autograder/submission into /autograder/results/results.json. When the sandbox
can't be built (and the bundle was not built with --trust-submissions), or the grader itself
fails, it writes no results, prints what the instructor needs to know on stdout (which
Gradescope shows to instructors only) and exits non-zero, so Gradescope reports a failed run
instead of recording a zero. `selftest` runs when the image is built: it grades the first
master notebook in the sandbox and fails the build unless it gets full marks.
MILKTEA_AUTOGRADER_ROOT (default /autograder) moves the layout, for testing on a normal machine.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from . import assignment as assignments_
from . import isolation, report
from .. import i18n
from ..i18n import _
from .evaluate import failed_all, grade_notebook
from .limits import Limits
from .notebook import atomic_write, notebook_language
from .prepare import check_hidden_dir, prepare
from .submissions import scan_folder

NO_SANDBOX = """The autograder could not build its sandbox in this image: {why}

Student code was NOT run and no score was recorded. Either
  - rebuild the image where bubblewrap can create namespaces (a container needs user namespaces,
    or --cap-add SYS_ADMIN / --security-opt seccomp=unconfined: Docker's default seccomp profile
    blocks them), or
  - rebuild the bundle with --trust-submissions: student code then runs with resource limits but
    without a sandbox, and every result says so to you (never to the student).
Check with `python -m milktea doctor` in the same image."""


class Unavailable(RuntimeError):
    """No sandbox here, and the bundle does not trust submissions: nothing may be graded."""


def _config(root: str) -> dict:
    with open(os.path.join(root, "source", "config.json")) as f:
        return json.load(f)


def _box(config: dict, box=None):
    box = isolation.probe() if box is None else box
    if not box.isolated and not config.get("trust"):
        raise Unavailable(NO_SANDBOX.format(why=box.why))
    return box


def results(root: str, box=None) -> tuple[dict, str]:
    """Grade root/submission with the bundle in root/source: (results.json data, what the
    instructor's stdout gets). Raises Unavailable."""
    source = os.path.join(root, "source")
    config = _config(root)
    box = _box(config, box)
    limits = Limits(**config["limits"])
    hidden = os.path.join(source, "hidden")
    hidden = hidden if os.path.isdir(hidden) else None
    chapters = config["chapters"]
    found = assignments_.find(os.path.join(source, "solutions"), chapters)
    hidden_files = check_hidden_dir(hidden, found)
    student = scan_folder(os.path.join(root, "submission"), chapters, chapters[0] if len(chapters) == 1 else None)
    lang = _lang(student)
    with i18n.speaking(lang):   # the feedback is written while grading, in the learner's language
        out, trouble, seconds = _grade(student, chapters, found, config, hidden_files, limits, box, source)
    record = {"student": "submission", "seed": config["seed"], "lang": lang, "results": [r.to_dict() for r in out]}
    data = report.results_json("submission", record, {})
    notes = data["extra_data"]["notes"]
    data["output"] = "\n".join([data["output"]] + [f"note: {n}" for n in notes])
    data["execution_time"] = seconds
    data["extra_data"] = {"seed": config["seed"], "kinds": data["extra_data"]["kinds"]}
    how = box.describe() if box.isolated else f"NOT ISOLATED (built with --trust-submissions): {box.why}"
    return data, "\n".join([f"isolation: {how}", f"seed: {config['seed']}"] + [f"grader: {t}" for t in trouble])


def _grade(student, chapters, found, config, hidden_files, limits, box, source):
    start, out, trouble = time.monotonic(), [], []
    for ch in chapters:
        prepared = prepare(found[ch], config["seed"], hidden_files.get(ch))
        sub = student.files.get(ch) or (student.files.get(None) if len(chapters) == 1 else None)
        if sub is None:
            out.append(failed_all(prepared, "", "not_submitted", _(
                "no notebook for {name} was found in the submission (upload {name}.ipynb)").format(name=ch)))
        elif sub.nb is None:
            out.append(failed_all(prepared, sub.shown, "malformed", sub.error))
        else:
            res = grade_notebook(sub.shown, prepared, limits, (source,), box if box.isolated else None, sub.nb)
            trouble += res.grader_notes
            out.append(res)
    if out:
        out[0].notes[:0] = [str(n) for n in student.notes]
    return out, trouble, round(time.monotonic() - start, 2)


def _lang(student) -> str:
    for sub in student.files.values():
        if sub is not None and sub.nb is not None:
            return notebook_language(sub.shown, sub.nb, by_folder=False)
    return "en"


def run(root: str, box=None) -> int:
    """Grade the submission; 0 with results.json written, 2 without a sandbox, 1 on a grader fault."""
    try:
        data, log = results(root, box)
    except Unavailable as e:
        print(str(e))
        return 2
    except Exception:   # the grader's own fault: the instructor's stdout gets the traceback, no score is recorded
        print("The autograder failed (no score was recorded):\n" + traceback.format_exc())
        return 1
    os.makedirs(os.path.join(root, "results"), exist_ok=True)
    atomic_write(os.path.join(root, "results", "results.json"), json.dumps(data, indent=1) + "\n")
    print(log)
    print(data["output"])
    return 0


def selftest(root: str, box=None) -> int:
    """When the image is built: the sandbox works here and a master notebook gets full marks."""
    config = _config(root)
    try:
        box = _box(config, box)
    except Unavailable as e:
        print(str(e))
        return 1
    if not box.isolated:
        print(f"WARNING: this bundle runs student code WITHOUT a sandbox (--trust-submissions): {box.why}")
        return 0
    source = os.path.join(root, "source")
    a = assignments_.find(os.path.join(source, "solutions"), config["chapters"][:1])[config["chapters"][0]]
    res = grade_notebook(a.master, prepare(a, config["seed"], None, public_only=True), Limits(**config["limits"]),
                         (), box)
    if res.score != res.points:
        print(f"self-test failed: the master notebook {os.path.basename(a.master)} got {res.score:g} of "
              f"{res.points:g} points in the sandbox:\n" + "\n".join(res.grader_notes + [
                  f"{t.id}: {' '.join(t.lines)}" for t in res.tasks if t.score < t.points]))
        return 1
    print(f"self-test passed: {box.describe()}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade.autograder", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=("run", "selftest"))
    ap.add_argument("--root", default=os.environ.get("MILKTEA_AUTOGRADER_ROOT", "/autograder"))
    args = ap.parse_args(argv)
    return run(args.root) if args.command == "run" else selftest(args.root)


if __name__ == "__main__":
    sys.exit(main())
