"""Parent side of the out-of-process protocol: start a child, feed it a job, watch the clock.

`run(cells, tasks, limits, sandbox)` executes the graded cells and calls each graded function
on its cases in a child process (see child.py), enforcing a wall-clock limit per cell, per task
and per submission by killing the child and everything it started. With a `Sandbox` from
isolation.probe() the child lives in its own namespaces (isolation.py); without one it is a
plain limited process, for a learner checking their own notebook. When a child hangs, dies or
breaks the protocol, the cell or case it was on is charged, and a fresh child carries on with
the rest, so one bad task never costs another. Results come back as plain data only.

Hidden cases never reach a child until all public cases are done, and from then on nothing the
child prints is kept: feedback can't carry a hidden input.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from . import isolation
from .child import decode

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
HIDDEN = "#hidden"    # suffix of the part of a task that holds its hidden cases


@dataclass(frozen=True)
class Limits:
    """How much one submission may use. Time limits are wall-clock, enforced by the parent."""
    task_seconds: float = 10.0          # one graded task (its public cases, then its hidden ones), or one cell
    submission_seconds: float = 120.0   # everything of one submission, restarts included
    startup_seconds: float = 60.0       # starting Python + numpy (+ torch): not student time
    memory_mb: int = 2048               # address space the child may add after importing numpy/torch
    file_mb: int = 16                   # largest file the child may write in its temp dir
    max_output: int = 16 << 20          # bytes of plain data per returned value
    tmp_mb: int = 64                    # size of an isolated child's private /tmp (it is memory)
    processes: int = 32                 # processes + threads of an isolated child (RLIMIT_NPROC)


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
    outcomes: dict = field(default_factory=dict)      # task id -> [Outcome per case], public then hidden
    missing: set = field(default_factory=set)         # task ids whose function was not defined
    cell_errors: dict = field(default_factory=dict)   # cell key -> {"kind", "message", "where"}
    output: str = ""                                  # tail of what the code printed (public phase only)
    notes: list = field(default_factory=list)         # trouble outside the student's tasks (clean-up)
    seconds: float = 0.0
    children: int = 0


class _Broken(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind, self.message = kind, message


def clean_text(text: str, limit: int) -> str:
    """A child's text made safe to store and show: bounded, valid UTF-8 (lone surrogates
    escaped), no control characters but newline and tab."""
    text = text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c >= " " or c in "\n\t" else "?" for c in text)


def _child_env(tmp: str) -> dict:
    env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    if "LD_LIBRARY_PATH" in os.environ:   # some clusters need it to load torch at all
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _task_seq(parts):
    seq = []
    for t in parts:
        seq.append(("task", t.id))
        for i in range(len(t.cases)):
            seq += [("case", t.id, i), ("result", t.id, i)]
        seq.append(("task_done", t.id))
    return seq


def _sequence(cells, public, hidden):
    seq = [("ready",)]
    for c in cells:
        seq += [("cell", c.key), ("cell_done", c.key)]
    return seq + _task_seq(public) + [("hidden",)] + _task_seq(hidden) + [("done",)]


def _exit_words(code, limits: Limits, isolated: bool = False) -> tuple[str, str]:
    if code is None:
        return "crash", "stopped answering"
    if isolated and code > 128:   # bwrap passes on a signal death as 128 + the signal
        code = 128 - code
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


def _init_pid(fd: int, seconds: float):
    """A pidfd of the sandbox's PID-namespace init, read from bwrap's --info-fd; None if it
    never came (bwrap failed: the result channel says so)."""
    data, end = b"", time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        try:
            pid = json.loads(data)["child-pid"]
        except (ValueError, KeyError, TypeError):
            continue
        try:
            return os.pidfd_open(pid)
        except OSError:
            return None
    return None


def _kill(proc, pidfd):
    """End the child and everything it started: SIGKILL to the PID-namespace init makes the
    kernel kill every process in that namespace (setsid or daemonised ones included); then
    wait until the namespace is gone. Without isolation: the child's process group."""
    if pidfd is not None:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
    if proc.pid is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if isinstance(proc, _Forked) and not proc._ended:
        proc.ctl.close()
    if pidfd is not None:
        select.select([pidfd], [], [], 5.0)   # readable once the init (and so its namespace) is gone
        os.close(pidfd)


class _Forked:
    """A child forked by the sandboxed zygote, with the parts of a Popen that _one_child uses."""
    pid = None

    def __init__(self, stdin, stdout, ctl):
        self.stdin, self.stdout, self.ctl = stdin, stdout, ctl
        self.returncode, self._ended = None, False

    def wait(self, timeout=None):
        """The child's exit code as its namespace's init reports it (None if the init was killed)."""
        if not self._ended:
            if not select.select([self.ctl], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("child", timeout)
            data = self.ctl.recv(64)
            self._ended = True
            self.ctl.close()
            try:
                self.returncode = int(data)
            except ValueError:
                pass
        return self.returncode


def _forked(sandbox, torch, wfd, limits):
    """Ask the zygote for a child; returns (a _Forked, the pidfd of its namespace's init)."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        z = isolation.zygote(sandbox, torch, _child_env("/tmp"), limits.startup_seconds)
        ctl, pidfd = z.spawn((in_r, out_w, wfd), isolation.next_uid(), limits.tmp_mb, limits.startup_seconds)
    except OSError:
        os.close(in_w)
        os.close(out_r)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    return _Forked(os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"), ctl), pidfd


def _send(stream, data: bytes, close: bool):
    """Write to the child's stdin from a thread: a child that stops reading can't block us."""
    def write():
        try:
            stream.write(data)
            stream.flush()
            if close:
                stream.close()
        except (OSError, ValueError):
            pass
    threading.Thread(target=write, daemon=True).start()


def _remove_tree(path: str) -> str:
    """Remove a temporary folder whatever the child left in it; '' or what went wrong."""
    try:
        shutil.rmtree(path)
    except BaseException as e:   # RecursionError on very deep trees, permissions changed, ...
        subprocess.run(["rm", "-rf", "--one-file-system", path], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
        if os.path.lexists(path):
            return f"the temporary folder could not be removed ({type(e).__name__})"
    return ""


def _drain(fd, tail: bytearray):
    """Read what is waiting on the (non-blocking) output pipe, keeping the last 8 KiB."""
    try:
        for _ in range(256):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            tail += chunk
            del tail[:-8192]
    except OSError:   # BlockingIOError: nothing more waiting
        pass


def _one_child(cells, public, hidden, limits: Limits, deny, torch: bool, budget: list, run: Run,
               sandbox, audit: bool = True):
    """Run one child until it finishes or breaks. Returns None, or (position, kind, message)
    where position is the sequence entry the child had not reached. `budget` = [end of the
    submission's time]; the time a child takes to start is added to it (not student time)."""
    started = time.monotonic()
    isolated = sandbox is not None and sandbox.isolated
    rfd, wfd = os.pipe()
    remaining = max(1.0, budget[0] - time.monotonic())
    job = {"limits": {"memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
                      "cpu_seconds": math.ceil(remaining + limits.startup_seconds),
                      "max_output": limits.max_output, "processes": limits.processes if isolated else None},
           "deny": list(deny), "torch": torch, "audit": audit,
           "cells": [c.__dict__ for c in cells],
           "tasks": [_task_json(t) for t in public]}
    later = json.dumps({"tasks": [_task_json(t) for t in hidden]})
    tmp, info_r, pidfd, fds, proc = None, None, None, (), None
    if isolated and sandbox.zygote:
        try:
            proc, pidfd = _forked(sandbox, torch, wfd, limits)
            os.close(wfd)
        except OSError as e:   # the grader's own trouble: this child starts the slow way instead
            run.notes.append(f"the sandboxed zygote failed ({clean_text(str(e), 300)}); "
                             "this child got bubblewrap and a Python of its own")
            sandbox = dataclasses.replace(sandbox, zygote=False)
    if proc is not None:
        pass
    elif isolated:
        info_r, info_w = os.pipe()
        argv = isolation.command([sys.executable, "-I", "-B", isolation.CHILD_PATH, str(wfd)], sandbox,
                                 limits.tmp_mb, CHILD, info_w)
        fds, cwd, env = (wfd, info_w), "/", _child_env("/tmp")
    else:
        tmp = tempfile.mkdtemp(prefix="milktea-grade-")
        argv, fds, cwd, env = [sys.executable, "-I", "-B", CHILD, str(wfd)], (wfd,), tmp, _child_env(tmp)
    try:
        if fds:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, pass_fds=fds, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        for fd in (rfd,) + fds + ((info_r,) if info_r is not None else ()):
            os.close(fd)
        if tmp:
            _remove_tree(tmp)
        return ("ready",), "crash", f"could not start Python: {e}"
    for fd in fds:
        os.close(fd)
    if info_r is not None:
        pidfd = _init_pid(info_r, limits.startup_seconds)
        os.close(info_r)
    _send(proc.stdin, (json.dumps(job) + "\n").encode(), close=False)
    run.children += 1
    seq, pos = _sequence(cells, public, hidden), 0
    sel = selectors.DefaultSelector()
    sel.register(rfd, selectors.EVENT_READ, "result")
    sel.register(proc.stdout, selectors.EVENT_READ, "output")
    buf, tail, keep = bytearray(), bytearray(), True
    os.set_blocking(proc.stdout.fileno(), False)   # a select() batch may list it after it was drained
    deadline = time.monotonic() + limits.startup_seconds
    failure = None
    try:
        while pos < len(seq):
            timeout = (deadline if pos == 0 else min(deadline, budget[0])) - time.monotonic()
            if timeout <= 0:
                if pos > 0 and budget[0] <= deadline:
                    raise _Broken("budget", f"the submission used its whole time budget "
                                            f"({limits.submission_seconds:g} s)")
                if seq[pos] == ("ready",):
                    raise _Broken("crash", f"Python did not start within {limits.startup_seconds:g} s")
                raise _Broken("timeout", f"did not finish within {limits.task_seconds:g} s")
            for key, _ in sel.select(timeout):
                if key.data == "output":
                    try:
                        chunk = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fd)
                    if keep:
                        tail += chunk
                        del tail[:-8192]
                    continue
                chunk = os.read(rfd, 1 << 20)
                if not chunk:
                    try:
                        proc.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        raise _Broken("protocol", "closed the grader's result channel") from None
                    raise _Broken(*_exit_words(proc.returncode, limits, isolated and not sandbox.zygote))
                buf += chunk
                if len(buf) > limits.max_output + (1 << 20) and b"\n" not in buf:
                    raise _Broken("bad_output", "sent a result larger than the limit")
                while b"\n" in buf and pos < len(seq):
                    line, _, rest = bytes(buf).partition(b"\n")
                    buf = bytearray(rest)
                    pos, deadline = _accept(line, seq, pos, deadline, limits, run)
                    if pos == 1:   # "ready": starting Python and the imports is not the student's time
                        budget[0] += time.monotonic() - started
                    if seq[pos - 1] == ("hidden",):
                        # every public case is done: keep what was printed so far, nothing after,
                        # and only now hand over the hidden cases
                        if keep:
                            _drain(proc.stdout.fileno(), tail)
                        keep = False
                        _send(proc.stdin, (later + "\n").encode(), close=True)
        # after "done" the child must only exit: anything more on the channel is charged
        end = time.monotonic() + 2.0
        while not buf.strip():
            ready, _, _ = select.select([rfd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(rfd, 65536) if ready else b""
            if not chunk:
                break
            buf += chunk
        if buf.strip():
            raise _Broken("protocol", "wrote to the grader's result channel after grading ended")
    except _Broken as b:
        failure = (seq[pos] if pos < len(seq) else ("after",), b.kind, b.message)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        failure = (seq[pos] if pos < len(seq) else ("after",), "crash", f"broke the connection to the grader ({e})")
    finally:
        _kill(proc, pidfd)
        sel.close()
        os.close(rfd)
        if keep:
            _drain(proc.stdout.fileno(), tail)
        proc.stdout.close()
        try:
            proc.stdin.close()
        except OSError:
            pass
        run.output = (run.output + tail.decode("utf-8", "replace"))[-8192:]
        if tmp:
            trouble = _remove_tree(tmp)
            if trouble:
                run.notes.append(trouble)
    return failure


def _task_json(t: TaskJob) -> dict:
    return {"id": t.id, "function": t.function, "cases": t.cases, "harness": t.harness}


def _reject(*_):
    raise ValueError("not plain JSON")


def _accept(line, seq, pos, deadline, limits, run):
    """Check one event against the expected sequence; record results. Returns (pos, deadline)."""
    try:
        ev = json.loads(line, parse_constant=_reject)
        name = ev["ev"]
        got = (name,) + tuple(ev[k] for k in ("key", "task", "i") if k in ev)
        hash(got)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise _Broken("protocol", "wrote something that is not a grader message on the result channel") from None
    want = seq[pos]
    now = time.monotonic()
    if name == "missing" and want[0] == "case" and want[1:] == (ev.get("task"), 0):
        task = want[1].removesuffix(HIDDEN)
        run.missing.add(task)
        run.outcomes.setdefault(task, [])
        return seq.index(("task_done", want[1]), pos), now + limits.task_seconds
    if got != want:
        raise _Broken("protocol", f"sent {clean_text(str(name), 40)!r} out of order on the result channel")
    if name == "cell_done":
        if ev.get("error") is not None:
            err = ev["error"]
            if not (isinstance(err, dict) and all(isinstance(err.get(k), str) for k in ("kind", "message", "where"))):
                raise _Broken("protocol", "sent a malformed cell report")
            run.cell_errors[ev["key"]] = {"kind": clean_text(err["kind"], 40), "message": clean_text(err["message"], 2000),
                                          "where": clean_text(err["where"], 500)}
    elif name == "result":
        run.outcomes.setdefault(ev["task"].removesuffix(HIDDEN), []).append(_outcome(ev))
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
    return Outcome(False, kind=clean_text(fields[0], 40), message=clean_text(fields[1], 2000),
                   where=clean_text(fields[2], 500), seconds=seconds)


def run(cells: list[Cell], tasks: list[TaskJob], limits: Limits = Limits(), deny=(), torch=None,
        sandbox=None, audit: bool = True) -> Run:
    """Grade-time execution of one submission: every task gets an outcome per case (public
    cases first, then hidden ones). `sandbox`: an isolation.Sandbox, or None for a plain
    limited child (a learner's own machine). `audit=False` leaves out the audit hook, to
    test what the sandbox alone holds."""
    if os.name != "posix":
        raise OSError("grading runs student code in a limited child process, which needs Linux or macOS "
                      "(on Windows, use WSL)")
    start = time.monotonic()
    budget = [start + limits.submission_seconds]
    torch = any("torch" in c.source for c in cells) or any("torch" in t.harness for t in tasks) \
        if torch is None else torch
    result = Run()
    cells = list(cells)
    counts = {t.id: len(t.cases) for t in tasks}
    public = [TaskJob(t.id, t.function, t.cases, harness=t.harness) for t in tasks]
    hidden = [TaskJob(t.id + HIDDEN, t.function, t.hidden, harness=t.harness) for t in tasks if t.hidden]
    while public or hidden:
        failure = _one_child(cells, public, hidden, limits, deny, torch, budget, result, sandbox, audit)
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
        got.append(Outcome(False, kind="skipped", message=f"not run: case {i + 1} did not finish"))


def _fail_last(result: Run, task: TaskJob, message: str):
    """Extra lines after the end: the last task run loses every case."""
    result.missing.discard(task.id)
    result.outcomes[task.id] = [Outcome(False, kind="protocol", message=message)] * max(1, len(task.cases) + len(task.hidden))
