"""Check your exercise notebook on the public tests, the way the grader will run it.

    python -m milktea.grade.check 03_topk.ipynb

Your graded cells run in a separate, limited process; the printout gives your points per
task and, for each mistake, the input, what was expected and what your code returned.
Passing the public tests is a good sign, not a guarantee: the final grade adds hidden tests.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys

from .. import i18n
from ..i18n import _
from .evaluate import WORDS, NotebookResult, grade_notebook
from .notebook import NotebookError, chapter_of, notebook_language, read_notebook
from .prepare import SetupError, prepare
from .public import CHAPTERS
from .sandbox import Limits


def find_solutions(notebook: str, chapter: str) -> str:
    """The folder holding the reference notebook: solutions/ beside exercises/, or in the course."""
    here = os.path.dirname(os.path.abspath(notebook))
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [here] if os.path.basename(here) == "solutions" else []
    candidates += [os.path.join(here, "..", "solutions"), os.path.join(os.getcwd(), "solutions"),
                   os.path.join(package_root, "solutions")]
    for d in candidates:
        if os.path.exists(os.path.join(d, chapter + ".ipynb")):
            return os.path.normpath(d)
    raise SetupError(f"can't find solutions/{chapter}.ipynb, which the checker uses to compute the right "
                     "answers: run from the course folder or pass --solutions DIR")


def format_result(res: NotebookResult, hidden: bool = False, width: int = 60) -> str:
    """The per-task table with the reasons, in a learner's words."""
    lines = []
    shared = len({tuple(t.lines) for t in res.tasks}) == 1 and res.tasks and res.tasks[0].lines \
        and res.tasks[0].kind in ("malformed", "not_submitted", "missing")
    for t in res.tasks:
        head = f"{t.id} {_(t.title)} "
        score = f"{t.score:g}/{t.points:g}"
        word = WORDS.get(t.kind, t.kind)
        status = "" if not t.kind else f"  {_(word)}"
        lines.append(f"  {head}{'.' * max(2, width - len(head))} {score:>7}{status}")
        for msg in ([] if shared else t.lines):
            lines += ["       " + m for m in msg.split("\n")]
    if shared:
        lines += ["  " + m for m in res.tasks[0].lines]
    lines += ["  " + _("note: {note}").format(note=n) for n in res.notes]
    if res.output.strip() and any(t.kind in ("crash", "timeout", "memory") for t in res.tasks):
        tail = res.output.strip().splitlines()[-6:]
        lines += ["  " + _("last lines your code printed:")] + ["    | " + x[:200] for x in tail]
    return "\n".join(lines)


def summary_line(res: NotebookResult) -> str:
    ok = sum(t.public_ok for t in res.tasks)
    if ok == len(res.tasks):
        return _("Public tests passed: {score:g}/{points:g}. The final grade also uses hidden tests.").format(
            score=res.score, points=res.points)
    return _("Score on the public tests: {score:g}/{points:g}. Public tests passed for {ok} of {n} tasks.").format(
        score=res.score, points=res.points, ok=ok, n=len(res.tasks))


def check_notebook(notebook: str, solutions: str | None = None, seed: int | None = None, limits: Limits = Limits(),
          quiet: bool = False) -> NotebookResult:
    """Grade `notebook` on the public tests and print the report; returns the result."""
    try:
        nb = read_notebook(notebook)
    except NotebookError:
        nb = None
    chapter = chapter_of(notebook, nb, CHAPTERS)
    if chapter is None:
        raise SetupError(f"can't tell which exercise {notebook} is: keep its name (e.g. 03_topk.ipynb)")
    seed = secrets.randbelow(10**6) if seed is None else seed
    solutions = solutions or find_solutions(notebook, chapter)
    prepared = prepare(chapter, solutions, None, seed)
    deny = [] if os.path.samefile(os.path.dirname(os.path.abspath(notebook)), solutions) else [solutions]
    with i18n.speaking(notebook_language(notebook, nb)):  # the feedback is written while grading
        res = grade_notebook(notebook, prepared, limits, deny)
        if not quiet:
            print(_("Checking {name} on the public tests (seed {seed}; --seed {seed} repeats these cases)").format(
                name=os.path.basename(notebook), seed=seed) + "\n")
            print(format_result(res))
            print("\n" + summary_line(res))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade.check", description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="+", help="exercise notebooks, e.g. 03_topk.ipynb")
    ap.add_argument("--solutions", help="folder with the reference notebooks (found automatically in the course)")
    ap.add_argument("--seed", type=int, help="repeat the random cases of an earlier run")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds allowed per task (default 10)")
    args = ap.parse_args(argv)
    status = 0
    for i, path in enumerate(args.notebooks):
        if i:
            print()
        try:
            res = check_notebook(path, args.solutions, args.seed, Limits(task_seconds=args.timeout))
        except SetupError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        status = status or int(not all(t.public_ok for t in res.tasks))
    return status


if __name__ == "__main__":
    sys.exit(main())
