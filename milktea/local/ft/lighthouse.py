"""torchft's lighthouse: the one server every replica group asks for a quorum, and which
counts a group dead once its heartbeats stop. Here: start one as a process of its own
(`start`), and read what it knows from its status page (`status`).

    >>> address("localhost:29510")
    'http://localhost:29510'
    >>> page = "Current quorum_id: 3 <br>\\n<li> group0:ab12: seen 0.12s ago</li>\\n<li> group2:cd34: seen 4.5s ago</li>"
    >>> parse_status(page)
    {'quorum_id': 3, 'heartbeats': {'group0:ab12': 0.12, 'group2:cd34': 4.5}}
    >>> fresh_groups(parse_status(page), heartbeat_ms=1000)
    {0: 0.12}
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from .config import PREFIX

_QUORUM = re.compile(r"Current quorum_id:\s*(-?\d+)")
_BEAT = re.compile(r"([^\s<>]+):\s+seen\s+([0-9.eE+-]+)s ago")


class LighthouseUnreachable(ConnectionError):
    """No lighthouse answers at the address given."""


def address(addr: str) -> str:
    """'host:port' or 'http://host:port' as the URL torchft takes."""
    if not isinstance(addr, str) or not addr.strip():
        raise TypeError(f"the lighthouse's address must be 'host:port' or 'http://host:port', got {addr!r}")
    addr = addr.strip().rstrip("/")
    return addr if addr.startswith(("http://", "https://")) else "http://" + addr


def parse_status(page: str) -> dict:
    """The lighthouse's status page as {"quorum_id": the last quorum's id (0: none yet),
    "heartbeats": {replica id: seconds since its last heartbeat}}."""
    m = _QUORUM.search(page)
    if m is None:
        raise ValueError("this is not a torchft lighthouse's status page (no 'Current quorum_id')")
    return {"quorum_id": int(m.group(1)), "heartbeats": {r: float(age) for r, age in _BEAT.findall(page)}}


def status(addr: str, timeout: float = 3.0) -> dict:
    """What the lighthouse at `addr` knows (see `parse_status`); LighthouseUnreachable if
    nothing answers there within `timeout` seconds."""
    url = address(addr) + "/status"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as f:
            page = f.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        raise LighthouseUnreachable(
            f"no torchft lighthouse answers at {address(addr)} ({getattr(e, 'reason', e)}): start one "
            f"(python -m milktea.local --ft --groups N starts its own) or give the right --lighthouse host:port"
        ) from None
    try:
        return parse_status(page)
    except ValueError as e:
        raise LighthouseUnreachable(f"{address(addr)} answers, but {e}") from None


def fresh_groups(st: dict, heartbeat_ms: int) -> dict[int, float]:
    """{group id: heartbeat age in s} of the replica groups the lighthouse still counts alive."""
    out = {}
    for rid, age in st["heartbeats"].items():
        name = rid.split(":", 1)[0]
        if name.startswith(PREFIX) and name[len(PREFIX):].isdigit() and age * 1e3 < heartbeat_ms:
            g = int(name[len(PREFIX):])
            out[g] = min(age, out.get(g, age))
    return out


def check_not_running(addr: str, group: int, heartbeat_ms: int) -> dict:
    """Refuse a group id that a live group has already: a heartbeat younger than the
    lighthouse's timeout is waited out once (a killed predecessor's goes stale), a second
    one is a group still running. Returns the lighthouse's status."""
    st = status(addr)
    if group in fresh_groups(st, heartbeat_ms):
        time.sleep(2 * heartbeat_ms / 1e3)
        st = status(addr)
        age = fresh_groups(st, heartbeat_ms).get(group)
        if age is not None:
            raise ValueError(f"replica group {group} is already running on the lighthouse at {address(addr)} "
                             f"(its last heartbeat is {age:.2f} s old): give each group an id of its own")
    return st


def wait_for_groups(addr: str, groups, heartbeat_ms: int, timeout: float) -> None:
    """Before the first quorum of a run, wait until every group in `groups` heartbeats,
    so that the first quorum holds them all (the lighthouse would otherwise start with
    the first ones it hears and make the others recover at once). A run already under
    way (a quorum was formed) is joined without waiting."""
    deadline = time.monotonic() + timeout
    while True:
        st = status(addr)
        if st["quorum_id"] > 0:
            return
        missing = sorted(set(groups) - set(fresh_groups(st, heartbeat_ms)))
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica groups {missing} did not reach the lighthouse at {address(addr)} within "
                               f"{timeout:g} s; start every group of the run (--groups says how many there are)")
        time.sleep(0.1)


# --- the lighthouse as a process ---------------------------------------------------------
# Run with `python -c`: no milktea or torch import, only torchft's compiled extension,
# loaded from its file (engine.extension_path); killed with its parent (PR_SET_PDEATHSIG).
PROGRAM = r"""
import ctypes, importlib.machinery, importlib.util, os, signal, sys, time
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
so, host, min_groups, heartbeat_ms, join_ms = sys.argv[1:6]
loader = importlib.machinery.ExtensionFileLoader("torchft._torchft", so)
module = importlib.util.module_from_spec(importlib.util.spec_from_loader("torchft._torchft", loader))
loader.exec_module(module)
server = module.LighthouseServer(bind="[::]:0", min_replicas=int(min_groups), join_timeout_ms=int(join_ms),
                                 quorum_tick_ms=20, heartbeat_timeout_ms=int(heartbeat_ms))
print("lighthouse http://%s:%s" % (host, server.address().rsplit(":", 1)[1]), flush=True)
signal.signal(signal.SIGTERM, lambda *_: (server.shutdown(), os._exit(0)))
while True:
    time.sleep(3600)
"""


def start(log_path: str, min_groups: int, heartbeat_ms: int, join_ms: int, host: str, env=None,
          timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start a lighthouse process (a session of its own) and return it and its address
    once it answers."""
    from .engine import extension_path
    cmd = [sys.executable, "-c", PROGRAM, extension_path(), host, str(min_groups), str(heartbeat_ms), str(join_ms)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True)
    try:
        line = _first_line(proc, timeout)
        if not line.startswith("lighthouse "):
            raise RuntimeError(f"the lighthouse did not start (exit code {proc.poll()}); see {log_path}")
        addr = line.split()[1]
        status(addr, timeout=timeout)
        return proc, addr
    except BaseException:
        stop(proc)
        raise


def _first_line(proc, timeout: float) -> str:
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        return ""
    return proc.stdout.readline().decode("utf-8", "replace").strip()


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole session and reap it."""
    from .proc import kill_session
    kill_session(proc.pid)
    with contextlib.suppress(Exception):
        proc.wait(10)
    if proc.stdout:
        proc.stdout.close()
