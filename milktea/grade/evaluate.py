"""Turn a child's plain-data outcomes into points and feedback a learner can act on.

Every comparison happens here, in the grader's process: whatever the student's code did to
numpy, torch or builtins inside its own process cannot change a verdict.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .. import i18n
from ..i18n import N_, _
from . import sandbox
from .child import BLOCK
from .notebook import NotebookError, graded_cells, read_notebook
from .prepare import Prepared
from .public_checks import Hashed, compare_hashed
from .spec import call_text, show

SHOWN = 3   # public failures described in full per task

# shown through milktea.i18n._ where the feedback is written (N_ marks them for the catalog)
WORDS = {
    "wrong": N_("wrong answer"),
    "exception": N_("raised an error"),
    "not_implemented": N_("not implemented yet"),
    "missing": N_("function not found"),
    "syntax": N_("syntax error"),
    "timeout": N_("too slow / endless loop"),
    "crash": N_("the process died"),
    "exit": N_("called exit()"),
    "memory": N_("out of memory"),
    "blocked": N_("did something not allowed"),
    "bad_output": N_("returned an ungradable value"),
    "protocol": N_("wrote to the grader's channel"),
    "budget": N_("submission time budget used up"),
    "malformed": N_("notebook unreadable"),
    "not_submitted": N_("notebook not submitted"),
}


@dataclass
class TaskResult:
    id: str
    function: str
    title: str
    points: float
    score: float = 0.0
    passed: int = 0
    total: int = 0
    public_total: int = 0
    public_passed: int = 0
    kind: str = ""                              # the first failure, public or hidden ("" when every case passed)
    public_kind: str = ""                       # the first failure among the public cases
    lines: list = field(default_factory=list)  # feedback on the public cases, one sentence each
    hidden_lines: list = field(default_factory=list)   # what the hidden cases say (a count, never an input)
    visibility: str = "after_due_date"          # when the hidden part may be shown (spec.Task.visibility)

    @property
    def public_ok(self) -> bool:
        return self.public_passed == self.public_total and self.public_total > 0

    @property
    def public_max(self) -> float:
        """The task's points that its public cases carry (points x public cases / all cases)."""
        return round(self.points * self.public_total / self.total, 2) if self.total else float(self.points)

    @property
    def public_score(self) -> float:
        return round(self.points * self.public_passed / self.total, 2) if self.total else 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> "TaskResult":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class NotebookResult:
    chapter: str
    path: str
    tasks: list = field(default_factory=list)   # [TaskResult]
    notes: list = field(default_factory=list)          # for the learner
    output: str = ""
    seconds: float = 0.0
    grader_notes: list = field(default_factory=list)   # the grader's own trouble: for the instructor only

    @property
    def score(self) -> float:
        return round(sum(t.score for t in self.tasks), 2)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tasks)

    def to_dict(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "tasks"}, "tasks": [t.to_dict() for t in self.tasks]}

    @classmethod
    def from_dict(cls, data: dict) -> "NotebookResult":
        return cls(data["chapter"], data["path"], [TaskResult.from_dict(t) for t in data["tasks"]],
                   list(data.get("notes", [])), data.get("output", ""), data.get("seconds", 0.0),
                   list(data.get("grader_notes", [])))


def failed_all(chapter: Prepared, path: str, kind: str, message: str) -> NotebookResult:
    """Every task of the assignment scores 0 for the same reason (unreadable, not submitted)."""
    res = NotebookResult(chapter.name, path)
    for p in chapter.tasks:
        res.tasks.append(TaskResult(p.task.id, p.task.function, chapter.title(p.task.id, i18n.language()), p.task.points,
                                    total=len(p.cases), public_total=p.public, kind=kind, public_kind=kind,
                                    lines=[str(message)], visibility=p.task.visibility,
                                    hidden_lines=_not_run(len(p.cases) - p.public, kind)))
    return res


def _not_run(hidden: int, kind: str) -> list:
    """What the hidden part says when none of its checks could run (never "passed")."""
    if not hidden:
        return []
    word = WORDS.get(kind, kind)   # marked with N_ above
    return [_("none of the {n} hidden checks ran: {why}").format(n=hidden, why=_(word))]


def grade_notebook(path: str, chapter: Prepared, limits: sandbox.Limits = sandbox.Limits(),
                   deny=(), box=None, nb: dict | None = None) -> NotebookResult:
    """Grade one notebook against a prepared chapter: read, run out of process, compare.
    `box`: an isolation.Sandbox for the child (None: a plain limited process); `nb`: the
    notebook already read (then `path` only names it)."""
    name = os.path.basename(path)
    if nb is None:
        try:
            nb = read_notebook(path, strip=True)
        except NotebookError as e:
            return failed_all(chapter, path, "malformed", str(e))
    tasks = [p.task for p in chapter.tasks]
    cells, where, notes = graded_cells(nb, tasks)
    if not cells:
        return failed_all(chapter, path, "missing",
                          f"{name} has no graded cells (code cells tagged 'graded'): was the tag removed, "
                          "or is this the right notebook?")
    jobs = [sandbox.TaskJob(p.task.id, p.task.function, p.encoded[:p.public], p.encoded[p.public:], p.task.harness)
            for p in chapter.tasks]
    run = sandbox.run(cells, jobs, limits, deny, sandbox=box, words=child_words(), allow=chapter.allow)
    res = NotebookResult(chapter.name, path, notes=list(notes), output=run.output, seconds=run.seconds,
                         grader_notes=list(run.notes))
    labels = {c.key: c.label for c in cells}
    for key, err in run.cell_errors.items():
        if key not in where.values():
            res.notes.append(f"{labels.get(key, key)} could not run: {_error_text(err, limits)}")
    for p in chapter.tasks:
        res.tasks.append(_task_result(p, run, where.get(p.task.id), labels, limits, chapter.title(p.task.id, i18n.language())))
    return res


def child_words() -> dict:
    """What the child says (child.WORDS), in the language being spoken now."""
    return {
        "where": _("line {line} of {cell}, in {function}: {code}"),
        "where_cell": _("line {line} of {cell}: {code}"),
        "read": _("graded code may not read {path}: only its own temporary directory is open to it"),
        "write": _("graded code may not write {path}: only its own temporary directory is open to it"),
        "list": _("graded code may not list the directory {path}"),
        "change": _("graded code may not change files outside its temporary directory ({event} {path})"),
        "import": _("graded code may not import {name}: write the idea with numpy or torch yourself"),
        "process": _("graded code may not start other processes (subprocess)"),
        "signal": _("graded code may not send signals to other processes"),
        "native": _("graded code may not load the native library {path}"),
        "event": _("graded code may not do this: {event}"),
        "deep": _("the result is nested too deeply"),
        "scalar": _("a numpy {dtype} scalar cannot be graded"),
        "dtype": _("an array of dtype {dtype} cannot be graded (use a number dtype)"),
        "keys": _("a dict with non-string keys cannot be graded"),
        "type": _("a value of type {type} cannot be graded: return None, True/False, a number, a string, bytes, "
                  "a numpy array or torch tensor of numbers, or lists, tuples and dicts (with string keys) of these"),
        "size": _("the result is {size} bytes of data; at most {limit} are accepted"),
    }


def _error_text(err: dict, limits) -> str:
    text = err["message"]
    if err["kind"] == "timeout":
        text += _(" (an endless loop at the top level of the cell?)")
    return text + (f" ({err['where']})" if err.get("where") else "")


def _task_result(p, run, cell_key, labels, limits, title) -> TaskResult:
    t = p.task
    r = TaskResult(t.id, t.function, title, t.points, total=len(p.cases), public_total=p.public,
                   visibility=t.visibility)
    cell_err = run.cell_errors.get(cell_key) if cell_key else None
    if t.id in run.missing or cell_key is None:
        r.public_kind = _missing(r, t, cell_key, cell_err, labels, limits)
        r.kind = r.public_kind
        r.hidden_lines = _not_run(r.total - r.public_total, r.kind)
        return r
    return _cases_result(r, p, run, cell_key, cell_err, labels, limits)


def _missing(r, t, cell_key, cell_err, labels, limits) -> str:
    """Why the task's function never existed: one line for the learner; returns the kind."""
    if cell_key is None:
        r.lines.append(_("no cell tagged 'task:{id}' and no function named {function}: keep the name and the tags "
                         "(graded, task:{id}) of its cell").format(id=t.id, function=t.function))
        return "missing"
    if cell_err:
        r.lines.append(_("{v} could not run, so {function} was never defined: {v2}").format(
            v=labels[cell_key], function=t.function, v2=_error_text(cell_err, limits)))
        return cell_err["kind"]
    r.lines.append(_("{v} defines no function named {function}: was it renamed? The grader calls {function}({v2}).")
                   .format(v=labels[cell_key], function=t.function, v2=", ".join(t.params)))
    return "missing"


def _cases_result(r, p, run, cell_key, cell_err, labels, limits) -> TaskResult:
    """Score and explain each case: public failures in full (up to SHOWN), hidden ones counted."""
    t = p.task
    if cell_err:
        r.lines.append(_("note: {v} raised an error when run: {v2}").format(v=labels[cell_key],
                                                                           v2=_error_text(cell_err, limits)))
    outcomes = run.outcomes.get(t.id, [])
    hidden_failed, shown, more, repeats, skipped, seen = 0, 0, 0, 0, 0, set()
    for i, case in enumerate(p.cases):
        o = outcomes[i] if i < len(outcomes) else sandbox.Outcome(False, kind="crash", message=_("was not run"))
        problem = _compare(t, p.expected[i], o.value, case.args) if o.ok else None
        if o.ok and problem is None:
            r.passed += 1
            r.public_passed += i < p.public
            continue
        kind = "wrong" if o.ok else o.kind
        r.kind = r.kind or kind
        if i >= p.public:
            hidden_failed += 1
            continue
        r.public_kind = r.public_kind or kind
        if kind == "skipped":
            skipped += 1
        elif kind == "not_implemented":
            if kind not in seen:   # the cell whose line raised it: a helper may live in another task's cell
                r.lines.append(_("replace the `raise NotImplementedError` line in {v} with your code").format(
                    v=labels.get(o.cell) or labels[cell_key]) + (_("\n    at {where}").format(where=o.where)
                                                                 if o.cell and o.cell != cell_key and o.where else ""))
            seen.add(kind)
        elif not o.ok and (o.kind, o.message) in seen:
            repeats += 1
        elif shown < SHOWN:
            shown += 1
            seen.add((o.kind, o.message))
            r.lines.append(_case_text(t, case, problem, o, limits))
        else:
            more += 1
    if repeats:
        r.lines.append((_("(the same error on {n} more public cases)") if repeats > 1 else
                        _("(the same error on {n} more public case)")).format(n=repeats))
    if more:
        r.lines.append((_("... and {n} more public cases failed") if more > 1 else
                        _("... and {n} more public case failed")).format(n=more))
    if skipped:
        r.lines.append((_("{n} more public cases were not run after that") if skipped > 1 else
                        _("{n} more public case was not run after that")).format(n=skipped))
    if hidden_failed:
        r.hidden_lines.append(_("{hidden_failed} of {v} hidden checks failed").format(
            hidden_failed=hidden_failed, v=len(p.cases) - p.public))
    r.score = round(t.points * r.passed / r.total, 2) if r.total else 0.0
    return r


def _compare(t, expected, got, args):
    if isinstance(expected, Hashed):
        return compare_hashed(expected, got)
    try:
        problem = t.compare(expected, got, args)
    except Exception as e:   # a shape of answer the comparator did not foresee
        problem = _("returned {v}, which could not be compared with the answer ({error})").format(
            v=show(got), error=type(e).__name__)
    if problem is not None and not t.reveal:   # its expected values would give the answer away
        return _("not the expected answer (this task's answers are not shown)")
    return problem


def _case_text(t, case, problem, o, limits) -> str:
    call = call_text(t.function, t.params, case)
    head = _("case '{label}': {call}").format(label=_(case.label), call=call)
    at = _("\n    at {where}").format(where=o.where) if o.where else ""
    if o.ok:
        return f"{head}\n    {problem}"
    if o.kind == "timeout":
        return _("{head}\n    {message} (an endless loop, or far too slow?)").format(head=head, message=o.message)
    if o.kind == "memory":
        return _("{head}\n    ran out of memory (the limit is {memory_mb} MB){at}").format(head=head, memory_mb=limits.memory_mb, at=at)
    if o.kind == "exit":
        return _("{head}\n    called exit()/sys.exit() ({message}): return a value instead{at}").format(head=head, message=o.message, at=at)
    if o.kind == "blocked":
        return _("{head}\n    was refused: {v}{at}").format(head=head, v=o.message.split(BLOCK, 1)[-1], at=at)
    if o.kind == "crash":
        return _("{head}\n    the Python process running your code {message}").format(head=head, message=o.message)
    if o.kind == "bad_output":
        return _("{head}\n    returned a value the grader can't read: {message}").format(head=head, message=o.message)
    if o.kind == "skipped":
        return f"{head}\n    {o.message}"
    if o.kind == "protocol":
        return _("{head}\n    {message}: graded code must return its answer, not write to the grader").format(head=head, message=o.message)
    if o.kind == "budget":
        return _("{head}\n    not run: {message}").format(head=head, message=o.message)
    hint = _(" (only the graded cells run: define helpers and imports inside them)") \
        if o.message.startswith("NameError") else ""
    return _("{head}\n    raised {message}{at}").format(head=head, message=o.message + hint, at=at)

