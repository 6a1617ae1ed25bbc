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
from dataclasses import dataclass, field

from .. import i18n
from ..i18n import N_, _
from . import late
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


@dataclass
class Policy:
    """The late policy of a run: the rule (late.Rule, or None) and each student's lateness."""
    rule: object = None
    lateness: dict = field(default_factory=dict)

    def of(self, student: str, score: float, overrides: dict) -> dict | None:
        """{"late", "penalty", "rule", "comment"} for a late student (or one with a `late`
        override), None otherwise."""
        late_ = self.lateness.get(student)
        o = overrides.get("late")
        if o is None and (self.rule is None or not late.describe(late_)):
            return None
        penalty = self.rule.penalty(score, late_) if self.rule is not None else 0.0
        if o is not None and o.points is not None:
            penalty = min(o.points, score)
        return {"late": late.describe(late_), "days": None if late_ is True else late_, "penalty": round(penalty, 2),
                "rule": str(self.rule or ""), "comment": o.comment if o is not None else ""}


def _late_text(info: dict) -> str:
    text = _("late penalty: -{points:g} points").format(points=info["penalty"])
    if info["late"]:
        when = _("{days:.1f} days").format(days=info["days"]) if info["days"] else _("marked late by the LMS")
        text += " (" + _("late: {late}").format(late=when) + (f", {info['rule']}" if info["rule"] else "") + ")"
    return text + (f": {info['comment']}" if info["comment"] else "")


def printed(res: NotebookResult) -> list:
    """What the code printed while its public cases ran (the last 8 KiB), as feedback lines."""
    text = res.output.strip("\n")
    if not text.strip():
        return []
    return ["  " + _("what your code printed (the last 8 KiB, public tests only):")] + [
        "    | " + line for line in text.splitlines()]


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
        if o is not None and o.points is not None:
            t.lines = list(t.lines) + [_adjusted(t, o)]
            t.score, t.kind = o.points, "adjusted"
            continue
        if o is not None:   # a comment alone: the task is shown as it is, the comment beside it
            t.lines = list(t.lines) + [_("the instructor's comment: {comment}").format(comment=o.comment or "-")]
        if t.total > t.public_total and not hidden_shown(t.visibility, stage):
            hidden = round(t.points - t.public_max, 2)
            t.score, t.points, t.kind = t.public_score, t.public_max, t.public_kind
            if t.visibility != "hidden":
                t.lines = list(t.lines) + [_("hidden tests ({points:g} points): results {when}").format(
                    points=hidden, when=_when(t.visibility))]
        else:
            t.lines = list(t.lines) + list(t.hidden_lines)
    return out


def feedback(student: str, record: dict, stage: str, overrides: dict, policy: Policy | None = None) -> str:
    """The feedback file of one student, in the language of their notebooks."""
    with i18n.speaking(record.get("lang", "en")):
        parts = [_("Feedback for {student}").format(student=student), ""]
        if record.get("absent"):
            parts += [_("nothing was submitted"), ""]
        shown = [view(r, stage, overrides) for r in results_of(record)]
        for res in ([] if record.get("absent") else shown):
            name = os.path.basename(res.path) or f"{res.chapter}.ipynb"
            parts += [_("{name}: {score:g} / {points:g}").format(name=name, score=res.score, points=res.points),
                      format_result(res)] + printed(res) + [""]
        total, points = sum(r.score for r in shown), sum(r.points for r in shown)
        later = sum(t.points for r in results_of(record) for t in r.tasks) - points
        info = (policy or Policy()).of(student, total, overrides)   # on what is shown: hidden scores stay hidden
        if info:
            parts.append(_late_text(info))
            total = max(0.0, total - info["penalty"])
        if later > 0.005:
            parts.append(_("Total so far: {total:g} / {points:g} (public tests, and hidden tests already shown)")
                         .format(total=round(total, 2), points=points))
            parts.append(_("{points:g} more points of hidden tests are shown later").format(points=round(later, 2)))
        else:
            parts.append(_("Total: {total:g} / {points:g} (public and hidden tests)").format(total=round(total, 2),
                                                                                            points=points))
    return "\n".join(parts) + "\n"


def _entry(name, number, score, max_score, visibility, output) -> dict:
    return {"name": name, "number": number, "score": round(score, 2), "max_score": round(max_score, 2),
            "visibility": visibility, "status": "passed" if score >= max_score - 1e-9 else "failed", "output": output}


def _hidden_output(t) -> str:
    """What the hidden entry says: never "passed" unless its points were all earned."""
    if t.hidden_lines:
        return "\n".join(t.hidden_lines)
    if t.score - t.public_score >= t.points - t.public_max - 1e-9:
        return _("all hidden checks passed")
    word = WORDS.get(t.kind, t.kind or "?")   # marked with N_ in evaluate.WORDS
    return _("the hidden checks were not passed: {why}").format(why=_(word))


def results_json(student: str, record: dict, overrides: dict, policy: Policy | None = None) -> dict:
    """Gradescope's results format: per task a visible entry for its public cases and, when it has
    hidden cases, one with the task's visibility for those; an override of the points replaces
    both by one (a comment alone is added to the public entry); a late penalty is an entry of its
    own, negative."""
    tests, kinds, applied = [], {}, []
    with i18n.speaking(record.get("lang", "en")):
        for res in results_of(record):
            for t in res.tasks:
                kinds[t.id] = t.kind
                o = overrides.get(t.id)
                if o is not None:
                    applied.append({"task": t.id, "points": o.points, "comment": o.comment, "autograder": t.score})
                if o is not None and o.points is not None:
                    tests.append(_entry(f"{t.id} {t.title}", t.id, o.points, t.points, "visible",
                                        "\n".join(list(t.lines) + [_adjusted(t, o)])))
                    continue
                comment = [_("the instructor's comment: {comment}").format(comment=o.comment or "-")] if o else []
                tests.append(_entry(f"{t.id} {t.title}", t.id, t.public_score, t.public_max, "visible",
                                    "\n".join(list(t.lines) + comment) or _("all public checks passed")))
                if t.total > t.public_total:
                    tests.append(_entry(f"{t.id} {t.title} ({_('hidden tests')})", f"{t.id}h",
                                        t.score - t.public_score, t.points - t.public_max, t.visibility,
                                        _hidden_output(t)))
        score = round(sum(t["score"] for t in tests), 2)
        points = round(sum(t["max_score"] for t in tests), 2)
        info = (policy or Policy()).of(student, score, overrides)
        if info:
            tests.append({"name": _("late penalty"), "number": "late", "score": -info["penalty"], "max_score": 0,
                          "visibility": "visible", "status": "failed" if info["penalty"] else "passed",
                          "output": _late_text(info)})
            score = round(max(0.0, score - info["penalty"]), 2)
        notes = [n for r in results_of(record) for n in r.notes]
        output = _("{student}: {score:g} / {points:g} points").format(student=student, score=score, points=points)
        if record.get("absent"):
            output += "\n" + _("nothing was submitted")
        for res in results_of(record):
            output += "".join("\n" + line for line in printed(res))
    return {"score": score, "output": output, "visibility": "visible", "stdout_visibility": "hidden",
            "tests": tests, "extra_data": {"student": student, "seed": record.get("seed"), "kinds": kinds,
                                           "notes": notes, "overrides": applied, "late": info}}


def task_scores(rendered: dict) -> dict:
    """{task id: points} from a results JSON (a task's public and hidden parts added)."""
    out = {}
    for t in rendered["tests"]:
        tid = t["name"].split()[0]   # a task id holds no space; its title follows
        out[tid] = round(out.get(tid, 0.0) + t["score"], 2)
    return out


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def cell(text) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts like a formula (= + - @, a tab or a
    carriage return) gets a leading apostrophe, so `=HYPERLINK(...)` in a folder name stays text.

    >>> cell("=SUM(A1)") == "'=SUM(A1)", cell("-1") == "'-1", cell("ada")
    (True, True, 'ada')
    """
    text = str(text)
    return "'" + text if text.startswith(_FORMULA) else text


def csv_text(rows: list, tasks: list, roster=None) -> str:
    """grades.csv: one row per student (student, the roster's other columns, one column per task,
    the late penalty when there is one, total, status). Every text cell is neutralised (`cell`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = roster.columns if roster is not None else []
    lateness = any(r is not None and r["extra_data"].get("late") for _s, r, _st in rows)
    w.writerow([cell(h) for h in ["student"] + extra + [f"{t.id} ({t.points:g})" for t in tasks]
                + (["late", "late penalty"] if lateness else [])
                + [f"total ({sum(t.points for t in tasks):g})", "status"]])
    for student, rendered, status in rows:
        info = roster.info(student) if roster is not None else []
        if rendered is None:
            w.writerow([cell(x) for x in [student] + info] + [""] * (len(tasks) + 2 * lateness) + ["", cell(status)])
            continue
        scores = task_scores(rendered)
        late_ = rendered["extra_data"].get("late") or {}
        w.writerow([cell(x) for x in [student] + info] + [f"{scores.get(t.id, 0):g}" for t in tasks]
                   + ([cell(late_.get("late", "")), f"{late_['penalty']:g}" if late_ else ""] if lateness else [])
                   + [f"{rendered['score']:g}", cell(status)])
    return buf.getvalue()


def summary(rendered: dict, tasks: list, graded: int, seconds: float, notes: list, how: str, errors: dict,
            reused: int = 0) -> str:
    """The instructor's summary: means and full marks per task, failures by kind, what was skipped.
    `reused`: records kept from an earlier run (students absent from a roster are not records)."""
    n = len(rendered)
    lines = [f"Graded {graded} submission{'s' if graded != 1 else ''} in {seconds:.1f} s "
             f"({reused} kept from an earlier run); {n + len(errors)} in the table.",
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
