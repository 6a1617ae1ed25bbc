"""Run one submission out of process: children, the protocol loop, the clocks.

`run(cells, tasks, limits, sandbox)` executes the graded cells and calls each graded function
on its cases in a child process (child.py, started by spawn.py: forked from the sandboxed
zygote, in bubblewrap, or as a plain limited process for a learner's own machine). The loop
below feeds the child its job, checks every line it sends (protocol.py) and watches two clocks
per cell, per task and per submission: the CPU time of the child's whole world (the limit that
counts: the same on an idle or a loaded machine) and the wall clock (`Limits.wall_factor` times
longer, for a child that waits instead of computing). When a child hangs, dies or breaks the
protocol, the cell or case it was on is charged, and a fresh child carries on with the rest, so
one bad task never costs another. Results come back as plain data only.

Hidden cases never reach a child until all public cases are done, and from then on nothing the
child prints is kept: feedback can't carry a hidden input.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import select
import selectors
import subprocess
import time

from . import scrub, spawn
from ..i18n import _
from .limits import Limits
from .protocol import HIDDEN, Broken, Cell, Outcome, Run, TaskJob, accept, clean_text, sequence

__all__ = ["Limits", "Cell", "TaskJob", "Outcome", "Run", "run", "clean_text", "HIDDEN"]
POLL = 0.1   # seconds between two readings of the child's CPU time
TAIL = 8192 + 4096   # bytes of printed output kept: 8 KiB shown, the rest so a path cut in two is still scrubbed


def _job(cells, public, limits: Limits, deny, torch: bool, audit: bool, cpu_left: float, isolated: bool,
         words: dict | None, allow=()) -> bytes:
    limits_json = {"memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
                   # the kernel's own stop, on top of the parent's clocks: all the CPU left, plus start-up
                   "cpu_seconds": math.ceil(cpu_left + limits.startup_seconds),
                   "max_output": limits.max_output, "processes": limits.processes if isolated else None}
    # the audit hook refuses the instructor's folders by name, but the child never holds their
    # names: only salted hashes of them (a cell that walks frames finds no path to look for)
    salt = secrets.token_hex(16)
    job = {"limits": limits_json, "deny": denied(deny, salt), "salt": salt, "torch": torch, "audit": audit,
           "allow": list(allow),
           "cells": [c.__dict__ for c in cells], "tasks": [t.to_json() for t in public], "words": words or {}}
    return (json.dumps(job) + "\n").encode()


def denied(folders, salt: str) -> list:
    """Salted hashes of the real paths of `folders`, for the child's audit hook (child.hashed)."""
    return sorted({hashlib.sha256((salt + os.path.realpath(p)).encode("utf-8", "surrogateescape")).hexdigest()
                   for p in folders if p})


class _Clocks:
    """The limits of one child while it runs: CPU and wall time of the current cell or task,
    and what is left of the submission's CPU budget and wall-clock end."""

    def __init__(self, child, limits: Limits, budget: dict):
        self.child, self.limits, self.budget = child, limits, budget
        self.started = time.monotonic()
        self.wall_end = self.started + limits.startup_seconds   # until "ready": starting is not student time
        self.cpu_ready = None      # CPU time of the child's world when it said "ready"
        self.cpu_mark = 0.0        # ... when the current cell or task began
        self.next_read = 0.0

    def ready(self):
        self.budget["wall_end"] += time.monotonic() - self.started
        self.cpu_ready = self.child.cpu_seconds()

    def fresh(self):
        """A cell, a task or the hidden phase begins: its clocks start."""
        self.wall_end = time.monotonic() + self.limits.wall(self.limits.task_seconds)
        self.cpu_mark = self.child.cpu_seconds()

    def used(self) -> float:
        return 0.0 if self.cpu_ready is None else max(0.0, self.child.cpu_seconds() - self.cpu_ready)

    def wait(self, starting: bool) -> float:
        """Seconds select() may wait now; raises Broken when a limit is passed."""
        now, lim = time.monotonic(), self.limits
        if not starting and now >= self.next_read:
            self.next_read = now + POLL
            cpu = self.child.cpu_seconds()
            if cpu - self.cpu_mark > lim.task_seconds:
                raise Broken("timeout", _("did not finish within {seconds:g} s of CPU time").format(
                    seconds=lim.task_seconds))
            if self.cpu_ready is not None and cpu - self.cpu_ready > self.budget["cpu"]:
                raise Broken("budget", _("the submission used its whole time budget ({seconds:g} s of CPU time)")
                             .format(seconds=lim.submission_seconds))
        end = self.wall_end if starting else min(self.wall_end, self.budget["wall_end"])
        if end <= now:
            if starting:
                raise Broken("crash", _("Python did not start within {seconds:g} s").format(seconds=lim.startup_seconds))
            if self.budget["wall_end"] <= self.wall_end:
                raise Broken("budget", _("the submission used its whole time budget ({seconds:g} s of wall-clock "
                                         "time)").format(seconds=lim.wall(lim.submission_seconds)))
            raise Broken("timeout", _("did not finish within {seconds:g} s of wall-clock time (it waited rather "
                                      "than computed)").format(seconds=lim.wall(lim.task_seconds)))
        return end - now if starting else min(end - now, POLL)


def _one_child(cells, public, hidden, limits: Limits, deny, torch: bool, budget: dict, run: Run,
               sandbox, audit: bool = True, words: dict | None = None, allow=()):
    """Run one child until it finishes or breaks. Returns None, or (position, kind, message)
    where position is the sequence entry the child had not reached. `budget`: {"cpu": CPU
    seconds left to the submission, "wall_end": its wall-clock end}."""
    try:
        child = spawn.start(sandbox, torch, limits, run.notes)
    except spawn.StartError as e:
        return ("ready",), "crash", str(e)
    isolated = sandbox is not None and sandbox.isolated
    child.send(_job(cells, public, limits, deny, torch, audit, max(1.0, budget["cpu"]), isolated, words, allow))
    later = (json.dumps({"tasks": [t.to_json() for t in hidden]}) + "\n").encode()
    run.children += 1
    seq, pos = sequence(cells, public, hidden), 0
    sel = selectors.DefaultSelector()
    sel.register(child.results, selectors.EVENT_READ, "result")
    sel.register(child.proc.stdout, selectors.EVENT_READ, "output")
    buf, tail, keep = bytearray(), bytearray(), True
    clocks = _Clocks(child, limits, budget)
    failure = None
    try:
        while pos < len(seq):
            for key, _events in sel.select(clocks.wait(pos == 0)):
                if key.data == "output":
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fd)
                    if keep:
                        tail += chunk
                        del tail[:-TAIL]
                    continue
                chunk = os.read(child.results, 1 << 20)
                if not chunk:
                    try:
                        child.proc.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        raise Broken("protocol", _("closed the grader's result channel")) from None
                    raise Broken(*spawn.exit_words(child.proc.returncode, limits, child.bwrap_exit))
                buf += chunk
                if len(buf) > limits.max_output + (1 << 20) and b"\n" not in buf:
                    raise Broken("bad_output", _("sent a result larger than the limit"))
                while b"\n" in buf and pos < len(seq):
                    line, _newline, rest = bytes(buf).partition(b"\n")
                    buf = bytearray(rest)
                    pos, fresh = accept(line, seq, pos, run)
                    if pos == 1:
                        clocks.ready()
                    if fresh:
                        clocks.fresh()
                    if seq[pos - 1] == ("hidden",):
                        # every public case is done: keep what was printed so far, nothing after,
                        # and only now hand over the hidden cases
                        if keep:
                            child.drain(tail)
                        keep = False
                        child.send(later, close=True)
        # after "done" the child must only exit: anything more on the channel is charged
        end = time.monotonic() + 2.0
        while not buf.strip():
            ready = select.select([child.results], [], [], max(0.0, end - time.monotonic()))[0]
            chunk = os.read(child.results, 65536) if ready else b""
            if not chunk:
                break
            buf += chunk
        if buf.strip():
            raise Broken("protocol", _("wrote to the grader's result channel after grading ended"))
    except Broken as b:
        failure = (seq[pos] if pos < len(seq) else ("after",), b.kind, b.message)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        failure = (seq[pos] if pos < len(seq) else ("after",), "crash",
                   _("broke the connection to the grader ({why})").format(why=type(e).__name__))
    finally:
        used = clocks.used()
        budget["cpu"] -= used
        run.cpu_seconds += used
        sel.close()
        trouble = child.end(tail if keep else None)
        run.output = clean_text(scrub.tail(run.output.encode() + bytes(tail), run.scrub), 2 * TAIL)
        if trouble:
            run.notes.append(trouble)
    return failure


def run(cells: list[Cell], tasks: list[TaskJob], limits: Limits = Limits(), deny=(), torch=None,
        sandbox=None, audit: bool = True, words: dict | None = None, allow=()) -> Run:
    """Grade-time execution of one submission: every task gets an outcome per case (public
    cases first, then hidden ones). `sandbox`: an isolation.Sandbox, or None for a plain
    limited child (a learner's own machine). `audit=False` leaves out the audit hook, to
    test what the sandbox alone holds. `words`: what the child says, in the learner's language
    (evaluate.child_words). `deny`: the instructor's folders; with the Python installation and the
    grader's code, every path of them is scrubbed from what the child sends (scrub.py). `allow`:
    modules whose own code may use native libraries through ctypes (child.install_hook)."""
    if os.name != "posix":
        raise OSError("grading runs student code in a limited child process, which needs Linux or macOS "
                      "(on Windows, use WSL)")
    start = time.monotonic()
    budget = {"cpu": limits.submission_seconds, "wall_end": start + limits.wall(limits.submission_seconds)}
    torch = any("torch" in c.source for c in cells) or any("torch" in t.harness for t in tasks) \
        if torch is None else torch
    result = Run(scrub=scrub.for_run(deny))
    cells = list(cells)
    counts = {t.id: len(t.cases) for t in tasks}
    public = [TaskJob(t.id, t.function, t.cases, harness=t.harness) for t in tasks]
    hidden = [TaskJob(t.id + HIDDEN, t.function, t.hidden, harness=t.harness) for t in tasks if t.hidden]
    while public or hidden:
        failure = _one_child(cells, public, hidden, limits, deny, torch, budget, result, sandbox, audit, words, allow)
        public = [t for t in public if not _finished(result, t, counts)]
        hidden = [t for t in hidden if not _finished(result, t, counts)]
        if failure is None:
            break
        at, kind, message = failure
        pending = public + hidden
        if at[0] in ("cell", "cell_done"):
            result.cell_errors[at[1]] = {"kind": kind, "message": message, "where": ""}
            cells = [c for c in cells if c.key != at[1]]
        elif at[0] in ("task", "case", "result") and kind != "budget":
            part = next(t for t in pending if t.id == at[1])
            _fail_rest(result, part, kind, message, counts)
            public, hidden = [t for t in public if t is not part], [t for t in hidden if t is not part]
        elif at[0] == "after":          # extra lines after "done": the last task run pays
            if tasks:
                _fail_last(result, tasks[-1], message)
        elif at[0] not in ("task_done", "hidden") or kind == "budget":   # startup, or time is up
            for part in pending:
                _fail_rest(result, part, kind, message, counts)
            public = hidden = []
    for t in tasks:   # a task whose function is missing has no outcomes at all
        if t.id in result.missing:
            result.outcomes[t.id] = []
    result.seconds = time.monotonic() - start
    return result


def _want(part: TaskJob, public: dict) -> int:
    """How many outcomes the task of `part` has once `part` is done (public cases come first)."""
    task = part.id.removesuffix(HIDDEN)
    return len(part.cases) + (public[task] if part.id.endswith(HIDDEN) else 0)


def _finished(result: Run, part: TaskJob, public: dict) -> bool:
    task = part.id.removesuffix(HIDDEN)
    return task in result.missing or len(result.outcomes.get(task, ())) >= _want(part, public)


def _fail_rest(result: Run, part: TaskJob, kind: str, message: str, public: dict):
    want = _want(part, public)
    got = result.outcomes.setdefault(part.id.removesuffix(HIDDEN), [])
    i = len(got)
    if i < want:
        got.append(Outcome(False, kind=kind, message=message))
    while len(got) < want:
        got.append(Outcome(False, kind="skipped", message=_("not run: case {n} did not finish").format(n=i + 1)))


def _fail_last(result: Run, task: TaskJob, message: str):
    """Extra lines after the end: the last task run loses every case."""
    result.missing.discard(task.id)
    result.outcomes[task.id] = [Outcome(False, kind="protocol", message=message)] * max(1, len(task.cases) + len(task.hidden))
