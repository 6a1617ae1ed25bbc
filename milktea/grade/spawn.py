"""Starting a child (child.py) and ending it: the process side of the grader, no protocol.

Three ways, one `Child` to drive: forked from the sandboxed zygote (isolation.zygote, as root),
bubblewrap and a Python of its own (isolation.command), or a plain limited process (a learner's
own machine: no sandbox). However it started, `Child.end()` kills everything the child started
(the PID namespace's init, or the process group) and waits until it is gone, and
`Child.cpu_seconds()` is the CPU time of every process in the child's world so far.

    >>> tree_cpu_seconds(os.getpid()) >= 0
    True
"""
from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import isolation
from ..i18n import _
from .limits import Limits

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class StartError(OSError):
    """The child could not be started (the grader's trouble, or the machine's)."""


def child_env(tmp: str) -> dict:
    env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    if "LD_LIBRARY_PATH" in os.environ:   # some clusters need it to load torch at all
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _children(pid: int) -> list:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of `root` and every live descendant, with what each has reaped
    of its own children (the init of a PID namespace reaps every orphan in it)."""
    total, stack, seen = 0, [root], set()
    while stack and len(seen) < 4096:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += sum(int(x) for x in fields[11:15])   # utime stime cutime cstime
        stack += _children(pid)
    return total / _TICK


def exit_words(code, limits: Limits, isolated: bool = False) -> tuple[str, str]:
    """(kind, message) for a child that ended with exit status `code` (None: unknown)."""
    if code is None:
        return "crash", _("stopped answering")
    if isolated and code > 128:   # bwrap passes on a signal death as 128 + the signal
        code = 128 - code
    if code < 0:
        sig = -code
        if sig == signal.SIGXCPU:
            return "timeout", _("used up its CPU time")
        if sig == signal.SIGKILL:
            return "crash", _("was killed (SIGKILL; out of memory? the limit is {mb} MB)").format(mb=limits.memory_mb)
        if sig == signal.SIGSEGV:
            return "crash", _("crashed (segmentation fault)")
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "crash", _("was stopped by signal {name}").format(name=name)
    return "crash", _("exited (exit code {code}) in the middle of grading: os._exit or a crash").format(code=code)


def _pidfd_pid(pidfd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None


def _init_pid(fd: int, seconds: float):
    """A pidfd of the sandbox's PID-namespace init, read from bwrap's --info-fd; None if it
    never came (bwrap failed: the result channel says so)."""
    data, end = b"", time.monotonic() + seconds
    while time.monotonic() < end:
        ready = select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]
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


class _Forked:
    """A child forked by the sandboxed zygote, with the parts of a Popen that Child uses."""
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

    def poll(self):
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None


def _forked(sandbox, torch, wfd, limits):
    """Ask the zygote for a child; returns (a _Forked, the pidfd of its namespace's init)."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        z = isolation.zygote(sandbox, torch, child_env("/tmp"), limits.startup_seconds)
        ctl, pidfd = z.spawn((in_r, out_w, wfd), isolation.next_uid(), limits.tmp_mb, limits.startup_seconds)
    except OSError:
        os.close(in_w)
        os.close(out_r)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    return _Forked(os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb"), ctl), pidfd


def remove_tree(path: str) -> str:
    """Remove a temporary folder whatever the child left in it; '' or what went wrong."""
    try:
        shutil.rmtree(path)
    except BaseException as e:   # RecursionError on very deep trees, permissions changed, ...
        subprocess.run(["rm", "-rf", "--one-file-system", path], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
        if os.path.lexists(path):
            return f"the temporary folder could not be removed ({type(e).__name__})"
    return ""


class Child:
    """One running child: `proc` (stdin, stdout, wait), `results` (the read end of its result
    pipe), how it was isolated, and how to end it. Made by `start`."""

    def __init__(self, proc, results: int, pidfd, tmp: str | None, bwrap_exit: bool):
        self.proc, self.results, self.pidfd, self.tmp = proc, results, pidfd, tmp
        self.bwrap_exit = bwrap_exit     # exit statuses pass through bubblewrap (128 + signal)
        root = _pidfd_pid(pidfd) if pidfd is not None else None
        self.root = root or proc.pid     # the process whose tree is the child's world

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.root) if self.root else 0.0

    def send(self, data: bytes, close: bool = False):
        """Write to the child's stdin from a thread: a child that stops reading can't block us."""
        stream = self.proc.stdin

        def write():
            try:
                stream.write(data)
                stream.flush()
                if close:
                    stream.close()
            except (OSError, ValueError):
                pass
        threading.Thread(target=write, daemon=True).start()

    def drain(self, tail: bytearray):
        """Read what is waiting on the (non-blocking) output pipe, keeping the last 12 KiB
        (sandbox.TAIL: 8 KiB are shown)."""
        try:
            for _chunk in range(256):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                tail += chunk
                del tail[:-12288]
        except OSError:   # BlockingIOError: nothing more waiting
            pass

    def end(self, tail: bytearray | None = None) -> str:
        """Kill everything the child started and wait until its world is gone: SIGKILL to the
        PID-namespace init makes the kernel kill every process in that namespace (setsid or
        daemonised ones included); without isolation, the child's process group. Returns a
        note when its temporary folder could not be removed."""
        proc, pidfd = self.proc, self.pidfd
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
        os.close(self.results)
        if tail is not None:
            self.drain(tail)
        proc.stdout.close()
        try:
            proc.stdin.close()
        except OSError:
            pass
        return remove_tree(self.tmp) if self.tmp else ""


def start(sandbox, torch: bool, limits: Limits, notes: list) -> Child:
    """A new child in `sandbox` (an isolation.Sandbox, or None: a plain limited process), its
    stdin open for the job. A zygote that fails leaves this child bubblewrap and a Python of
    its own (said in `notes`). Raises StartError when no child could be started."""
    isolated = sandbox is not None and sandbox.isolated
    rfd, wfd = os.pipe()
    if isolated and sandbox.zygote:
        try:
            proc, pidfd = _forked(sandbox, torch, wfd, limits)
            os.close(wfd)
            os.set_blocking(proc.stdout.fileno(), False)
            return Child(proc, rfd, pidfd, None, False)
        except OSError as e:   # the grader's own trouble: this child starts the slow way instead
            text = str(e)[:300]
            notes.append(f"the sandboxed zygote failed ({text}); this child got bubblewrap and a Python of its own")
            sandbox = dataclasses.replace(sandbox, zygote=False)
    tmp, info_r = None, None
    if isolated:
        info_r, info_w = os.pipe()
        argv = isolation.command([isolation.python_executable(), "-I", "-B", isolation.CHILD_PATH, str(wfd)], sandbox,
                                 limits.tmp_mb, CHILD, info_w)
        fds, cwd, env = (wfd, info_w), "/", child_env("/tmp")
    else:
        tmp = tempfile.mkdtemp(prefix="milktea-grade-")
        argv, fds, cwd, env = [sys.executable, "-I", "-B", CHILD, str(wfd)], (wfd,), tmp, child_env(tmp)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, pass_fds=fds, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        for fd in (rfd,) + fds + ((info_r,) if info_r is not None else ()):
            os.close(fd)
        if tmp:
            remove_tree(tmp)
        raise StartError(_("could not start Python ({why})").format(why=type(e).__name__)) from None
    for fd in fds:
        os.close(fd)
    pidfd = None
    if info_r is not None:
        pidfd = _init_pid(info_r, limits.startup_seconds)
        os.close(info_r)
    os.set_blocking(proc.stdout.fileno(), False)   # a select() batch may list it after it was drained
    return Child(proc, rfd, pidfd, tmp, isolated)
