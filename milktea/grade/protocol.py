"""What parent and child say to each other, and what the parent accepts.

The child writes one JSON line per event on its result pipe. The parent knows the whole
expected sequence in advance (`sequence`): "ready", then each cell's start and end, then each
public task's cases and results, "hidden", the hidden tasks, "done". `accept` checks a line
against the position it should fill and records a result; anything else (malformed JSON, an
event out of order, a malformed report) raises `Broken`, charged to the task it interrupted.

    >>> sequence([Cell("c0", "cell", "x = 1")], [TaskJob("1", "f", [{}])], [])[:4]
    [('ready',), ('cell', 'c0'), ('cell_done', 'c0'), ('task', '1')]
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..i18n import _
from .wire import decode

HIDDEN = "#hidden"    # suffix of the part of a task that holds its hidden cases


@dataclass
class Cell:
    key: str
    label: str      # how feedback names it, e.g. "the cell of task 03.1"
    source: str


@dataclass
class TaskJob:
    id: str
    function: str
    cases: list     # [{"args": encoded list, "kwargs": encoded dict or None}], public ones
    hidden: list = field(default_factory=list)   # the same, sent only after every public case
    harness: str = ""   # the grader's code that calls the function (see spec.Task.harness)

    def to_json(self) -> dict:
        return {"id": self.id, "function": self.function, "cases": self.cases, "harness": self.harness}


@dataclass
class Outcome:
    ok: bool
    value: object = None
    kind: str = ""          # why it failed: exception, timeout, crash, memory, blocked, ...
    message: str = ""
    where: str = ""
    seconds: float = 0.0
    cell: str = ""          # the key of the graded cell whose line raised ("" when none did)


@dataclass
class Run:
    outcomes: dict = field(default_factory=dict)      # task id -> [Outcome per case], public then hidden
    missing: set = field(default_factory=set)         # task ids whose function was not defined
    cell_errors: dict = field(default_factory=dict)   # cell key -> {"kind", "message", "where"}
    output: str = ""                                  # tail of what the code printed (public phase only)
    notes: list = field(default_factory=list)         # trouble outside the student's tasks (clean-up)
    seconds: float = 0.0                              # wall-clock seconds
    cpu_seconds: float = 0.0                          # CPU seconds of the student's code, every child together
    children: int = 0
    scrub: object = str                               # what every text from the child passes (scrub.Scrubber)


class Broken(Exception):
    """The child broke the protocol, a limit, or died: `kind` and `message` say how."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind, self.message = kind, message


def clean_text(text: str, limit: int) -> str:
    """A child's text made safe to store and show: bounded, valid UTF-8 (lone surrogates
    escaped), no control characters but newline and tab."""
    text = text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c >= " " or c in "\n\t" else "?" for c in text)


def _task_seq(parts):
    seq = []
    for t in parts:
        seq.append(("task", t.id))
        for i in range(len(t.cases)):
            seq += [("case", t.id, i), ("result", t.id, i)]
        seq.append(("task_done", t.id))
    return seq


def sequence(cells, public, hidden) -> list:
    """Every event the child must send, in order."""
    seq = [("ready",)]
    for c in cells:
        seq += [("cell", c.key), ("cell_done", c.key)]
    return seq + _task_seq(public) + [("hidden",)] + _task_seq(hidden) + [("done",)]


def _reject(*args):
    raise ValueError("not plain JSON")


def accept(line: bytes, seq: list, pos: int, run: Run) -> tuple[int, bool]:
    """Check one event against the expected sequence; record results. Returns (the next
    position, whether a new clock starts: a cell, a task, or the hidden phase begins)."""
    try:
        ev = json.loads(line, parse_constant=_reject)
        name = ev["ev"]
        got = (name,) + tuple(ev[k] for k in ("key", "task", "i") if k in ev)
        hash(got)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise Broken("protocol", _("wrote something that is not a grader message on the result channel")) from None
    want = seq[pos]
    if name == "missing" and want[0] == "case" and want[1:] == (ev.get("task"), 0):
        task = want[1].removesuffix(HIDDEN)
        run.missing.add(task)
        run.outcomes.setdefault(task, [])
        return seq.index(("task_done", want[1]), pos), True
    if got != want:
        raise Broken("protocol", _("sent {name} out of order on the result channel").format(
            name=repr(clean_text(str(name), 40))))
    if name == "cell_done":
        if ev.get("error") is not None:
            err = ev["error"]
            if not (isinstance(err, dict) and all(isinstance(err.get(k), str) for k in ("kind", "message", "where"))):
                raise Broken("protocol", _("sent a malformed cell report"))
            run.cell_errors[ev["key"]] = {"kind": clean_text(err["kind"], 40),
                                          "message": clean_text(run.scrub(err["message"]), 2000),
                                          "where": clean_text(run.scrub(err["where"]), 500),
                                          "cell": _cell(err, seq)}
    elif name == "result":
        run.outcomes.setdefault(ev["task"].removesuffix(HIDDEN), []).append(outcome(ev, run.scrub, seq))
        return pos + 1, False
    elif name == "case":
        return pos + 1, False     # the task's clock keeps running across its cases
    return pos + 1, True


def _cell(ev, seq) -> str:
    """The cell key a failure report names (the cell whose line raised), if it is one of the job's."""
    key = ev.get("cell")
    return key if isinstance(key, str) and ("cell", key) in seq else ""


def outcome(ev, scrub=str, seq=()) -> Outcome:
    """One case's result as the parent keeps it: every text and every string of the value passed
    through `scrub` (scrub.py) on the way in."""
    seconds = ev.get("seconds") if isinstance(ev.get("seconds"), float) else 0.0
    if ev.get("ok") is True:
        try:
            value = decode(ev.get("value"))
            return Outcome(True, scrub.value(value) if hasattr(scrub, "value") else value, seconds=seconds)
        except (ValueError, TypeError, RecursionError):
            return Outcome(False, kind="protocol", message=_("its result could not be read back"), seconds=seconds)
    fields = [ev.get(k) for k in ("kind", "message", "where")]
    if not all(isinstance(f, str) for f in fields):
        return Outcome(False, kind="protocol", message=_("sent a malformed failure report"))
    return Outcome(False, kind=clean_text(fields[0], 40), message=clean_text(scrub(fields[1]), 2000),
                   where=clean_text(scrub(fields[2]), 500), seconds=seconds, cell=_cell(ev, seq))
