"""Parent side of the out-of-process protocol: start a child, feed it a job, watch the clock.

`run(cells, tasks, limits)` executes the graded cells and calls each graded function on its
cases in a child process (see child.py), enforcing a wall-clock limit per cell, per task and
per submission by killing the child's process group. When a child hangs, dies or breaks the
protocol, the cell or case it was on is charged, and a fresh child carries on with the
rest, so one bad task never costs another. Results come back as plain data only.
"""
from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .child import decode

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


@dataclass(frozen=True)
class Limits:
    """How much one submission may use. Time limits are wall-clock, enforced by the parent."""
    task_seconds: float = 10.0          # one graded task (all its cases), or one graded cell
    submission_seconds: float = 120.0   # everything of one submission, restarts included
    startup_seconds: float = 60.0       # starting Python + numpy (+ torch): not student time
    memory_mb: int = 2048               # address space the child may add after importing numpy/torch
    file_mb: int = 16                   # largest file the child may write in its temp dir
    max_output: int = 16 << 20          # bytes of plain data per returned value


@dataclass
class Cell:
    key: str
    label: str      # how feedback names it, e.g. "the cell of task 03.1"
    source: str


@dataclass
class TaskJob:
    id: str
    function: str
    cases: list     # [{"args": encoded list, "kwargs": encoded dict or None}]


@dataclass
class Outcome:
    ok: bool
    value: object = None
    kind: str = ""          # why it failed: exception, timeout, crash, memory, blocked, ...
    message: str = ""
    where: str = ""
    seconds: float = 0.0


@dataclass
class Run:
    outcomes: dict = field(default_factory=dict)      # task id -> [Outcome per case]
    missing: set = field(default_factory=set)         # task ids whose function was not defined
    cell_errors: dict = field(default_factory=dict)   # cell key -> {"kind", "message", "where"}
    output: str = ""                                  # tail of what the code printed
    seconds: float = 0.0
    children: int = 0


class _Broken(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind, self.message = kind, message


def _child_env(tmp: str) -> dict:
    env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    if "LD_LIBRARY_PATH" in os.environ:   # some clusters need it to load torch at all
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _sequence(cells, tasks):
    seq = [("ready",)]
    for c in cells:
        seq += [("cell", c.key), ("cell_done", c.key)]
    for t in tasks:
        seq.append(("task", t.id))
        for i in range(len(t.cases)):
            seq += [("case", t.id, i), ("result", t.id, i)]
        seq.append(("task_done", t.id))
    seq.append(("done",))
    return seq


def _exit_words(code, limits: Limits) -> tuple[str, str]:
    if code is None:
        return "crash", "stopped answering"
    if code < 0:
        sig = -code
        if sig == signal.SIGXCPU:
            return "timeout", "used up its CPU time"
        if sig == signal.SIGKILL:
            return "crash", f"was killed (SIGKILL; out of memory? the limit is {limits.memory_mb} MB)"
        if sig == signal.SIGSEGV:
            return "crash", "crashed (segmentation fault)"
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "crash", f"was stopped by signal {name}"
    return "crash", f"exited (exit code {code}) in the middle of grading: os._exit or a crash"


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _one_child(cells, tasks, limits: Limits, deny, torch: bool, budget_end: float, run: Run):
    """Run one child until it finishes or breaks. Returns None, or (position, kind, message)
    where position is the sequence entry the child had not reached."""
    tmp = tempfile.mkdtemp(prefix="milktea-grade-")
    rfd, wfd = os.pipe()
    remaining = max(1.0, budget_end - time.monotonic())
    job = {"limits": {"memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
                      "cpu_seconds": math.ceil(remaining + limits.startup_seconds),
                      "max_output": limits.max_output},
           "deny": list(deny), "torch": torch,
           "cells": [c.__dict__ for c in cells],
           "tasks": [{"id": t.id, "function": t.function, "cases": t.cases} for t in tasks]}
    job_path = os.path.join(tmp, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-B", CHILD, job_path, str(wfd)],
                                cwd=tmp, env=_child_env(tmp), pass_fds=(wfd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        os.close(rfd)
        os.close(wfd)
        shutil.rmtree(tmp, ignore_errors=True)
        return ("ready",), "crash", f"could not start Python: {e}"
    os.close(wfd)
    run.children += 1
    seq, pos = _sequence(cells, tasks), 0
    sel = selectors.DefaultSelector()
    sel.register(rfd, selectors.EVENT_READ, "result")
    sel.register(proc.stdout, selectors.EVENT_READ, "output")
    buf, tail = bytearray(), bytearray()
    now = time.monotonic()
    deadline = now + limits.startup_seconds
    failure = None
    try:
        while pos < len(seq):
            timeout = min(deadline, budget_end) - time.monotonic()
            if timeout <= 0:
                if budget_end <= deadline:
                    raise _Broken("budget", f"the submission used its whole time budget "
                                            f"({limits.submission_seconds:g} s)")
                if seq[pos] == ("ready",):
                    raise _Broken("crash", f"Python did not start within {limits.startup_seconds:g} s")
                raise _Broken("timeout", f"did not finish within {limits.task_seconds:g} s")
            for key, _ in sel.select(timeout):
                if key.data == "output":
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                    tail += chunk
                    del tail[:-8192]
                    continue
                chunk = os.read(rfd, 1 << 20)
                if not chunk:
                    try:
                        proc.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        raise _Broken("protocol", "closed the grader's result channel") from None
                    raise _Broken(*_exit_words(proc.returncode, limits))
                buf += chunk
                if len(buf) > limits.max_output + (1 << 20) and b"\n" not in buf:
                    raise _Broken("bad_output", "sent a result larger than the limit")
                while b"\n" in buf:
                    line, _, rest = bytes(buf).partition(b"\n")
                    buf = bytearray(rest)
                    pos, deadline = _accept(line, seq, pos, deadline, limits, run)
    except _Broken as b:
        failure = (seq[pos], b.kind, b.message)
    except (OSError, subprocess.SubprocessError) as e:
        failure = (seq[pos], "crash", f"broke the connection to the grader ({e})")
    finally:
        _kill(proc)
        sel.close()
        os.close(rfd)
        try:
            os.set_blocking(proc.stdout.fileno(), False)
            tail += os.read(proc.stdout.fileno(), 65536)
        except (OSError, ValueError):
            pass
        proc.stdout.close()
        run.output = (run.output + tail.decode("utf-8", "replace"))[-8192:]
        shutil.rmtree(tmp, ignore_errors=True)
    return failure


def _reject(*_):
    raise ValueError("not plain JSON")


def _accept(line, seq, pos, deadline, limits, run):
    """Check one event against the expected sequence; record results. Returns (pos, deadline)."""
    try:
        ev = json.loads(line, parse_constant=_reject)
        name = ev["ev"]
        got = (name,) + tuple(ev[k] for k in ("key", "task", "i") if k in ev)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise _Broken("protocol", "wrote something that is not a grader message on the result channel") from None
    want = seq[pos]
    now = time.monotonic()
    if name == "missing" and want[0] == "case" and want[1:] == (ev.get("task"), 0):
        run.missing.add(want[1])
        run.outcomes[want[1]] = []
        return seq.index(("task_done", want[1]), pos), now + limits.task_seconds
    if got != want:
        raise _Broken("protocol", f"sent {name!r} out of order on the result channel")
    if name == "cell_done":
        if ev.get("error") is not None:
            err = ev["error"]
            if not (isinstance(err, dict) and all(isinstance(err.get(k), str) for k in ("kind", "message", "where"))):
                raise _Broken("protocol", "sent a malformed cell report")
            run.cell_errors[ev["key"]] = {k: err[k][:2000] for k in ("kind", "message", "where")}
    elif name == "result":
        run.outcomes.setdefault(ev["task"], []).append(_outcome(ev))
        return pos + 1, deadline
    elif name == "case":
        return pos + 1, deadline     # the task's clock keeps running across its cases
    return pos + 1, now + limits.task_seconds


def _outcome(ev) -> Outcome:
    seconds = ev.get("seconds") if isinstance(ev.get("seconds"), float) else 0.0
    if ev.get("ok") is True:
        try:
            return Outcome(True, decode(ev.get("value")), seconds=seconds)
        except (ValueError, TypeError, RecursionError):
            return Outcome(False, kind="protocol", message="its result could not be read back", seconds=seconds)
    fields = [ev.get(k) for k in ("kind", "message", "where")]
    if not all(isinstance(f, str) for f in fields):
        return Outcome(False, kind="protocol", message="sent a malformed failure report")
    return Outcome(False, kind=fields[0][:40], message=fields[1][:2000], where=fields[2][:500], seconds=seconds)


def run(cells: list[Cell], tasks: list[TaskJob], limits: Limits = Limits(), deny=(), torch=None) -> Run:
    """Grade-time execution of one submission: every task gets an outcome per case."""
    if os.name != "posix":
        raise OSError("grading runs student code in a limited child process, which needs Linux or macOS "
                      "(on Windows, use WSL)")
    start = time.monotonic()
    budget_end = start + limits.submission_seconds
    torch = any("torch" in c.source for c in cells) if torch is None else torch
    result = Run()
    cells, pending = list(cells), list(tasks)
    while pending:
        failure = _one_child(cells, pending, limits, deny, torch, budget_end, result)
        done = {t.id for t in pending if t.id in result.missing
                or len(result.outcomes.get(t.id, ())) == len(t.cases)}
        pending = [t for t in pending if t.id not in done]
        if failure is None:
            break
        at, kind, message = failure
        if at[0] in ("cell", "cell_done"):
            result.cell_errors[at[1]] = {"kind": kind, "message": message, "where": ""}
            cells = [c for c in cells if c.key != at[1]]
        elif at[0] in ("task", "case", "result") and kind != "budget":
            task = next(t for t in pending if t.id == at[1])
            _fail_rest(result, task, kind, message)
            pending.remove(task)
        elif at[0] != "task_done" or kind == "budget":   # startup, or time is up: charge all left
            for task in pending:
                _fail_rest(result, task, kind, message)
            pending = []
    result.seconds = time.monotonic() - start
    return result


def _fail_rest(result: Run, task: TaskJob, kind: str, message: str):
    got = result.outcomes.setdefault(task.id, [])
    i = len(got)
    if i < len(task.cases):
        got.append(Outcome(False, kind=kind, message=message))
    while len(got) < len(task.cases):
        got.append(Outcome(False, kind="skipped", message=f"not run: case {i + 1} did not finish"))
