"""Everything a person reads, rendered from the autograded records: the grade table, each
student's Gradescope-format JSON and feedback, the instructor's summary.

Each task with hidden cases has two parts: its public cases (always shown) and its hidden ones,
shown according to the task's visibility (Gradescope's: visible, after_due_date,
after_published, hidden) and the stage of the course: in a class run, `--feedback-stage`
(before_due_date, after_due_date, published) decides what the feedback files show; in
results JSON each part carries its visibility and Gradescope decides. An instructor's
override (student, task, points, comment) replaces the task's score everywhere and says so.

    >>> hidden_shown("after_due_date", "before_due_date"), hidden_shown("after_due_date", "published")
    (False, True)
"""
from __future__ import annotations

import copy
import csv
import io
import os
from collections import Counter
from dataclasses import dataclass

from .. import i18n
from ..i18n import N_, _
from .check import format_result
from .evaluate import WORDS, NotebookResult
from .records import results_of

STAGES = ("before_due_date", "after_due_date", "published")
_RANK = {"visible": 0, "after_due_date": 1, "after_published": 2, "hidden": 3}
WORDS.setdefault("adjusted", N_("adjusted by the instructor"))


@dataclass
class Override:
    points: float | None       # None: the autograder's score stands (a comment only)
    comment: str


def hidden_shown(visibility: str, stage: str) -> bool:
    """May the hidden part of a task with this visibility be shown at this stage?"""
    return _RANK.get(visibility, 3) <= STAGES.index(stage)


def _when(visibility: str) -> str:
    return {"after_due_date": _("after the due date"), "after_published": _("when grades are published")}.get(
        visibility, _("never"))


def _adjusted(t, o: Override) -> str:
    return _("adjusted by the instructor: {comment} (the autograder gave {score:g} of {points:g})").format(
        comment=o.comment or "-", score=t.score, points=t.points)


def view(res: NotebookResult, stage: str, overrides: dict) -> NotebookResult:
    """What a learner may see now: hidden parts folded away until their stage, overrides applied."""
    out = copy.deepcopy(res)
    for t in out.tasks:
        o = overrides.get(t.id)
        if o is not None:
            t.lines = list(t.lines) + [_adjusted(t, o)]
            if o.points is not None:
                t.score, t.kind = o.points, "adjusted"
            continue
        if t.total > t.public_total and not hidden_shown(t.visibility, stage):
            hidden = round(t.points - t.public_max, 2)
            t.score, t.points, t.kind = t.public_score, t.public_max, t.public_kind
            if t.visibility != "hidden":
                t.lines = list(t.lines) + [_("hidden tests ({points:g} points): results {when}").format(
                    points=hidden, when=_when(t.visibility))]
        else:
            t.lines = list(t.lines) + list(t.hidden_lines)
    return out


def feedback(student: str, record: dict, stage: str, overrides: dict) -> str:
    """The feedback file of one student, in the language of their notebooks."""
    with i18n.speaking(record.get("lang", "en")):
        if record.get("absent"):
            return _("Feedback for {student}").format(student=student) + "\n\n" + _("nothing was submitted") + "\n"
        parts = [_("Feedback for {student}").format(student=student), ""]
        shown = [view(r, stage, overrides) for r in results_of(record)]
        for res in shown:
            name = os.path.basename(res.path) or f"{res.chapter}.ipynb"
            parts += [_("{name}: {score:g} / {points:g}").format(name=name, score=res.score, points=res.points),
                      format_result(res), ""]
        total, points = sum(r.score for r in shown), sum(r.points for r in shown)
        later = sum(t.points for r in results_of(record) for t in r.tasks) - points
        parts.append(_("Total: {total:g} / {points:g} (public and hidden tests)").format(total=total, points=points))
        if later > 0.005:
            parts.append(_("{points:g} more points of hidden tests are shown later").format(points=round(later, 2)))
    return "\n".join(parts) + "\n"


def _entry(name, number, score, max_score, visibility, output) -> dict:
    return {"name": name, "number": number, "score": round(score, 2), "max_score": round(max_score, 2),
            "visibility": visibility, "status": "passed" if score >= max_score - 1e-9 else "failed", "output": output}


def results_json(student: str, record: dict, overrides: dict) -> dict:
    """Gradescope's results format: per task a visible entry for its public cases and, when it has
    hidden cases, one with the task's visibility for those; overrides replace both by one."""
    tests, kinds, applied = [], {}, []
    with i18n.speaking(record.get("lang", "en")):
        for res in results_of(record):
            for t in res.tasks:
                kinds[t.id] = t.kind
                o = overrides.get(t.id)
                if o is not None:
                    score = t.score if o.points is None else o.points
                    tests.append(_entry(f"{t.id} {t.title}", t.id, score, t.points, "visible",
                                        "\n".join(list(t.lines) + [_adjusted(t, o)])))
                    applied.append({"task": t.id, "points": o.points, "comment": o.comment, "autograder": t.score})
                    continue
                tests.append(_entry(f"{t.id} {t.title}", t.id, t.public_score, t.public_max, "visible",
                                    "\n".join(t.lines) or _("all public checks passed")))
                if t.total > t.public_total:
                    tests.append(_entry(f"{t.id} {t.title} ({_('hidden tests')})", f"{t.id}h",
                                        t.score - t.public_score, t.points - t.public_max, t.visibility,
                                        "\n".join(t.hidden_lines) or _("all hidden checks passed")))
        score = round(sum(t["score"] for t in tests), 2)
        points = round(sum(t["max_score"] for t in tests), 2)
        notes = [n for r in results_of(record) for n in r.notes]
        output = _("{student}: {score:g} / {points:g} points").format(student=student, score=score, points=points)
        if record.get("absent"):
            output += "\n" + _("nothing was submitted")
    return {"score": score, "output": output, "visibility": "visible", "stdout_visibility": "hidden",
            "tests": tests, "extra_data": {"student": student, "seed": record.get("seed"), "kinds": kinds,
                                           "notes": notes, "overrides": applied}}


def task_scores(rendered: dict) -> dict:
    """{task id: points} from a results JSON (a task's public and hidden parts added)."""
    out = {}
    for t in rendered["tests"]:
        tid = t["name"].split()[0]   # a task id holds no space; its title follows
        out[tid] = round(out.get(tid, 0.0) + t["score"], 2)
    return out


def csv_text(rows: list, tasks: list) -> str:
    """grades.csv: one row per student (student, one column per task, total, status)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student"] + [f"{t.id} ({t.points:g})" for t in tasks]
               + [f"total ({sum(t.points for t in tasks):g})", "status"])
    for student, rendered, status in rows:
        if rendered is None:
            w.writerow([student] + [""] * len(tasks) + ["", status])
            continue
        scores = task_scores(rendered)
        w.writerow([student] + [f"{scores.get(t.id, 0):g}" for t in tasks] + [f"{rendered['score']:g}", status])
    return buf.getvalue()


def summary(rendered: dict, tasks: list, graded: int, seconds: float, notes: list, how: str, errors: dict) -> str:
    """The instructor's summary: means and full marks per task, failures by kind, what was skipped."""
    n = len(rendered)
    lines = [f"Graded {graded} submission{'s' if graded != 1 else ''} in {seconds:.1f} s "
             f"({n - graded - len(errors)} kept from an earlier run); {n + len(errors)} in the table.",
             f"Isolation: {how}" if how else "", "",
             f"{'task':<6} {'mean':>6} {'max':>5}  full marks"]
    kinds = Counter()
    for t in tasks:
        scores = [task_scores(r).get(t.id, 0.0) for r in rendered.values()]
        full = sum(s >= t.points for s in scores)
        mean = sum(scores) / n if n else 0.0
        lines.append(f"{t.id:<6} {mean:>6.2f} {t.points:>5g}  {full}/{n}")
    for r in rendered.values():
        kinds.update(k for k in r["extra_data"]["kinds"].values() if k)
    lines += ["", "failures by kind (tasks): " + (", ".join(f"{WORDS.get(k, k)} {c}" for k, c in kinds.most_common())
                                                   or "none")]
    if errors:
        lines.append("grader errors (rerun to retry): " + ", ".join(errors))
        lines += [f"  {s}: {m.strip().splitlines()[-1] if m.strip() else '?'}" for s, m in errors.items()]
    lines += [f"note: {x}" for x in notes]
    return "\n".join(lines) + "\n"
