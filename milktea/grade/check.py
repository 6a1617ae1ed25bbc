"""Check your exercise notebook on the public tests, the way the grader will run it.

    python -m milktea.grade.check 03_topk.ipynb

Your graded cells run in a separate, limited process, on the public checks that came with the
exercise (NAME.checks.json beside the notebook); the printout gives your points per task and,
for each mistake, the input, what was expected and what your code returned. Passing the
public tests is a good sign, not a guarantee: the final grade adds hidden tests.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from .. import i18n
from ..tables import display_width
from ..i18n import _
from .evaluate import WORDS, NotebookResult, grade_notebook
from . import assignment, public_checks
from .assignment import SetupError
from .notebook import NotebookError, assignment_of, notebook_language, read_notebook
from .sandbox import Limits


def format_result(res: NotebookResult, hidden: bool = False, width: int = 60) -> str:
    """The per-task table with the reasons, in a learner's words."""
    lines = []
    shared = len({tuple(t.lines) for t in res.tasks}) == 1 and res.tasks and res.tasks[0].lines \
        and res.tasks[0].kind in ("malformed", "not_submitted", "missing")
    for t in res.tasks:
        head = f"{t.id} {t.title} "
        score = f"{t.score:g}/{t.points:g}"
        word = WORDS.get(t.kind, t.kind)
        status = "" if not t.kind else f"  {_(word)}"
        lines.append(f"  {head}{'.' * max(2, width - display_width(head))} {score:>7}{status}")   # CJK: 2 columns
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


def check_notebook(notebook: str, checks: str | None = None, limits: Limits = Limits(),
                   quiet: bool = False) -> NotebookResult:
    """Grade `notebook` on the public checks shipped with it and print the report; returns the
    result. `checks`: the NAME.checks.json file (found beside the notebook by default)."""
    try:
        nb = read_notebook(notebook)
    except NotebookError:
        nb = None
    with i18n.speaking(notebook_language(notebook, nb)):   # errors too are said in the learner's language
        name = assignment_of(notebook, nb, _names_near(notebook, checks))
        if name is None:
            _no_checks(notebook, nb)
        prepared = _public(notebook, name, checks)
    with i18n.speaking(notebook_language(notebook, nb)):  # the feedback is written while grading
        res = grade_notebook(notebook, prepared, limits)
        if not quiet:
            print(_("Checking {name} on the public tests").format(name=os.path.basename(notebook)) + "\n")
            print(format_result(res))
            print("\n" + summary_line(res))
    return res


def _claimed(notebook: str, nb) -> str | None:
    """The assignment a notebook says it is: its metadata (written by the release), else its file
    name without a copy's " (1)"."""
    meta = (nb or {}).get("metadata", {}).get("milktea", {})
    if isinstance(meta, dict) and isinstance(meta.get("assignment"), str) and meta["assignment"]:
        return meta["assignment"]
    stem = os.path.basename(notebook)
    for suffix in (".ipynb", ".py"):
        stem = stem.removesuffix(suffix)
    stem = re.sub(r"\s*\(\d+\)$", "", stem)
    return stem if re.fullmatch(r"[\w.-]+", stem) else None


def _no_checks(notebook: str, nb) -> None:
    """SetupError when no checks file names this notebook: the file that is missing and where it
    belongs, when the notebook says which exercise it is."""
    if not os.path.isfile(notebook):
        raise SetupError(_("there is no notebook {notebook}: check the name and the folder").format(notebook=notebook))
    name = _claimed(notebook, nb)
    if name is None:
        raise SetupError(_("can't tell which exercise {notebook} is: keep its name (e.g. 03_topk.ipynb), "
                           "or pass --checks FILE").format(notebook=notebook))
    path = os.path.join(os.path.dirname(os.path.abspath(notebook)), name + public_checks.SUFFIX)
    raise SetupError(_("the public checks of {name} are missing: expected at {path} (the file comes with the "
                       "exercise: put it beside the notebook), or pass --checks FILE").format(name=name, path=path))


def _public(notebook: str, name: str, checks: str | None):
    """The public checks of `notebook`: its checks file, or, in a folder of master notebooks
    (an instructor checking an assignment), the same checks built from the master."""
    try:
        path = public_checks.find(notebook, name, checks)
    except SetupError:
        here = os.path.dirname(os.path.abspath(notebook))
        master = os.path.join(here, name + ".ipynb")
        if os.path.basename(here) in assignment.TRANSLATIONS:   # a translated master: use the original
            master = os.path.join(os.path.dirname(here), name + ".ipynb")
        if checks or not os.path.exists(assignment.tests_path(master)):
            raise
        return public_checks.prepared(public_checks.build(assignment.load(master)), master)
    return public_checks.prepared(public_checks.load(path), path)


def _names_near(notebook: str, given: str | None) -> list:
    """Assignment names whose checks (or tests files) sit beside the notebook, one folder up,
    or are `given`."""
    if given:
        return [os.path.basename(given).removesuffix(public_checks.SUFFIX)]
    here = os.path.dirname(os.path.abspath(notebook))
    names = []
    for folder in (here, os.path.dirname(here), os.getcwd()):
        try:
            names += [e[:-len(suffix)] for e in os.listdir(folder)
                      for suffix in (public_checks.SUFFIX, assignment.TESTS_SUFFIX) if e.endswith(suffix)]
        except OSError:
            continue
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade.check", description=__doc__.split("\n")[0],
                                 epilog="Exit status: 0 when every task passes its public checks, 1 otherwise, "
                                        "2 when a notebook or its checks can't be found.")
    ap.add_argument("notebooks", nargs="+", help="exercise notebooks, e.g. 03_topk.ipynb")
    ap.add_argument("--checks", help="the public checks file (default: NAME.checks.json beside the notebook)")
    ap.add_argument("--timeout", type=float, default=10.0, help="CPU seconds allowed per task (default 10)")
    args = ap.parse_args(argv)
    status = 0
    for i, path in enumerate(args.notebooks):
        if i:
            print()
        try:
            res = check_notebook(path, args.checks, Limits(task_seconds=args.timeout))
        except SetupError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        status = status or int(not all(t.public_ok for t in res.tasks))
    return status


if __name__ == "__main__":
    sys.exit(main())
