"""python -m milktea.grade: grade a class, and the instructor's other commands.

    python -m milktea.grade SUBMISSIONS --out GRADES [options]   grade a class (the default command)
    python -m milktea.grade release SOLUTIONS --out RELEASE      the student release of assignments
    python -m milktea.grade gradescope --out BUNDLE [options]    a Gradescope autograder bundle
    python -m milktea.grade tasks [SOLUTIONS]                    the task table, in Markdown
    python -m milktea.grade.check NOTEBOOK                       (learners) check a notebook

docs/grading.md tells the whole workflow; each command's --help lists its options.
"""
from __future__ import annotations

import argparse
import sys

from . import report
from .classroom import grade_class
from .prepare import SetupError
from .sandbox import Limits

COMMANDS = {"release": "write the student release of a folder of assignments (notebooks + public checks)",
            "gradescope": "build a Gradescope autograder bundle (BUNDLE/ and BUNDLE.zip)",
            "tasks": "print the task table of a folder of assignments, in Markdown"}
EPILOG = ("other commands (each has its own --help):\n"
          + "\n".join(f"  python -m milktea.grade {c:<11} {what}" for c, what in COMMANDS.items())
          + "\n  python -m milktea.grade.check  (learners) check a notebook on its public checks"
          + "\n\nExit status: 0 when the class was graded, 2 when nothing was graded (the message says why).")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["gradescope"]:
        from .gradescope import main as gradescope
        return gradescope(argv[1:])
    if argv[:1] == ["release"]:
        from .release import main as release
        return release(argv[1:])
    if argv[:1] == ["tasks"]:
        from .tables import main as tasks
        return tasks(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m milktea.grade", epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description="Grade a folder of submissions out of process, in a sandbox: "
                                             "grades.csv, results/, feedback/ and summary.txt in --out.")
    ap.add_argument("submissions", help="SUBMISSIONS_DIR/<student>/<exercise>.ipynb or SUBMISSIONS_DIR/<student>.ipynb")
    ap.add_argument("--out", required=True, help="folder for grades.csv, results/, feedback/, summary.txt")
    ap.add_argument("--solutions", default="solutions",
                    help="folder of the master notebooks, each with NAME.tests.py beside it (default: solutions)")
    ap.add_argument("--hidden", help="folder of hidden tests: <exercise>.py files defining CASES")
    ap.add_argument("--assignment", "--chapter", dest="chapter",
                    help="grade only this assignment (needed for <student>.ipynb files without its metadata)")
    ap.add_argument("--seed", type=int, help="seed of the random cases (default: kept from the last run in --out)")
    ap.add_argument("--task-timeout", type=float, default=10.0, help="CPU seconds per task and per graded cell (10)")
    ap.add_argument("--submission-timeout", type=float, default=120.0, help="CPU seconds per submission (120)")
    ap.add_argument("--wall-factor", type=float, default=5.0,
                    help="wall-clock limits are this many times the CPU limits: they stop code that waits (5)")
    ap.add_argument("--memory-mb", type=int, default=2048,
                    help="address space (MB) student code may add to Python + numpy (+ torch) (2048)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time (1)")
    ap.add_argument("--roster", help="CSV of the class: an id column, then names, emails or LMS ids; absent "
                                     "students get a row with zero, LMS download names map to the ids")
    ap.add_argument("--overrides", help="CSV with the header student,task,points,comment: your own points for a "
                                        "task (empty points: a comment only); kept on every rerun")
    ap.add_argument("--feedback-stage", choices=report.STAGES, default="after_due_date",
                    help="what feedback shows of hidden tests, by their visibility (after_due_date)")
    ap.add_argument("--late-penalty", metavar="RULE",
                    help="take points off late submissions: P%% (any late one), P%%/day (per started day), "
                         "P%%/day,max=Q%%; lateness from Canvas's _LATE_ names, Gradescope's submission times "
                         "or --submitted (see docs/grading.md)")
    ap.add_argument("--due", help="the due date, e.g. 2026-12-01T23:59 (a time without a zone is UTC), for "
                                        "--submitted or Gradescope's submission times")
    ap.add_argument("--submitted", metavar="CSV", help="CSV with the header student,submitted: each student's "
                                                       "submission time (an LMS export), compared with --due")
    ap.add_argument("--trust-submissions", action="store_true",
                    help="grade even where student code can't be isolated (no bubblewrap, macOS); "
                         "the summary and run.json then say the run was not isolated")
    args = ap.parse_args(argv)
    limits = Limits(task_seconds=args.task_timeout, submission_seconds=args.submission_timeout,
                    memory_mb=args.memory_mb, wall_factor=args.wall_factor)
    try:
        grade_class(args.submissions, args.out, args.solutions, args.hidden, args.seed, limits,
                    args.chapter, args.jobs, trust=args.trust_submissions, roster=args.roster,
                    overrides=args.overrides, stage=args.feedback_stage, late_rule=args.late_penalty,
                    due=args.due, submitted=args.submitted)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
