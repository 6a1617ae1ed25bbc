"""The processes of a fault-tolerant run: each in a session of its own (stopped as a whole
with one killpg), each killed by the kernel when its parent dies (even by SIGKILL), and
each marked in its environment, so that a check can find any left behind.

    >>> MARK
    'MILKTEA_FT_RUN'
    >>> left_behind("no-such-run-" + str(os.getpid()))
    []
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal

MARK = "MILKTEA_FT_RUN"      # every process of a run has MILKTEA_FT_RUN=<the run's id> in its environment


def die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when its parent dies (PR_SET_PDEATHSIG);
    if the parent died already, leave now."""
    parent = os.getppid()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def kill_session(pid: int) -> None:
    """SIGKILL every process of the session that `pid` leads (a group started with
    start_new_session=True); nothing if it is gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def left_behind(run_id: str) -> list[int]:
    """The pids of live processes marked with this run's id (Linux /proc; zombies not
    counted: they hold no resources and their parent reaps them)."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and f"{MARK}={run_id}".encode() in env.split(b"\0"):
            found.append(int(name))
    return found


def entry(train, argv=None) -> None:
    """A group process's main: `train(spec, group, incarnation)` with the arguments the
    launcher gives (SPEC GROUP INCARNATION); a failure is written to the group's events
    (the launcher names it) and the process leaves with code 1."""
    import json
    import pickle
    import sys
    import time
    import traceback

    from ...distributed.worker import end_process
    die_with_parent()
    args = argv or sys.argv[1:]
    spec_path, group, incarnation = args[:3]
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    code = 0
    try:
        if args[3:4] == ["standby"]:
            spec = dict(spec, standby=os.path.join(spec["folder"], f"group{group}-{incarnation}.go"))
        train(spec, int(group), int(incarnation))
    except BaseException as e:   # noqa: BLE001  (the launcher reads the reason from the events)
        with open(os.path.join(spec["folder"], f"group{group}-{incarnation}.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps({"e": "error", "group": int(group), "incarnation": int(incarnation),
                                "time": time.time(), "error": f"{type(e).__name__}: {e}",
                                "traceback": traceback.format_exc()}) + "\n")
        code = 1
    end_process(code)
