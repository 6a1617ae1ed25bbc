"""The worker's side of `launch`: what runs inside each rank's process.

`launch` (milktea.distributed.launch, the parent's side) starts one process per rank with
`run_worker` as its target. Inside, the rank joins the process group, runs the function,
and sends its result (or its error, with the traceback) back through a pipe; a heartbeat
thread tells the parent twice a second how far the rank has got (`progress`) and where
it is, so that a stalled run names the rank that stopped. From inside a launched
function, `report(obj)` sends anything to the parent's `on_message` at once.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import Any

from milktea.distributed import stacks
from milktea.distributed.hang import BEAT_EVERY_S, STEPS, where

_conn = None  # inside a worker: the pipe to the parent (used by report() and progress())
_steps = STEPS       # inside a worker: progress() calls so far (shared with hang.watch)
_send_lock = threading.Lock()   # the heartbeat thread and the main thread share the pipe
_beating = threading.Event()    # set while the worker's function runs


def report(obj: Any) -> None:
    """From inside a worker: send `obj` (picklable) to the parent's `on_message` callback
    now, while the run goes on (progress, per-step records). Does nothing outside launch."""
    if _conn is not None:
        _send(_conn, ("msg", int(os.environ.get("RANK", 0)), obj))


def progress() -> None:
    """From inside a worker (under `launch`, or torchrun with `hang.watch()`): count one unit
    of progress (a training step). When the run stalls, the rank named is the one not
    waiting in a collective, with the fewest steps (milktea.distributed.hang). Costs an
    integer increment (a thread sends it twice a second)."""
    _steps[0] += 1


def _send(conn, msg) -> None:
    # a large message is several writes: one thread at a time, or they interleave
    with _send_lock:
        conn.send(msg)


def _heartbeat(conn, rank: int, main_id: int) -> None:
    while True:
        time.sleep(BEAT_EVERY_S)
        if not _beating.is_set():   # the function has returned
            return
        spot, waiting = where(main_id)
        try:
            _send(conn, ("beat", rank, _steps[0], spot, waiting))
        except (OSError, ValueError):   # the parent has gone or the pipe was closed
            return


def end_process(code: int = 0) -> None:
    """Leave this rank's process now: flush stdout/stderr, then os._exit(code). Call it
    last, after dist.destroy_process_group(), in a process that joined a process group.

    Why not a normal exit: DistributedDataParallel keeps a reference to its gloo process
    group after the model is gone (torch 2.13: three gloo threads are still running after
    destroy_process_group() whenever a DDP model was built, none without one). They are
    still running while the interpreter and the C++ runtime tear themselves down, and a
    few exits in twenty abort with "terminate called without an active exception" after
    all the work is done. os._exit skips that tear-down; nothing is lost once the process
    group is gone and the output is flushed. Atexit handlers do not run."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _die_with_parent() -> None:
    # Linux: the kernel kills this worker if the parent dies, even by SIGKILL.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def join_group(rank: int, world: int, cfg: dict) -> None:
    """In a new worker process: its namespace and environment, then the process group."""
    if cfg["netns"]:
        from milktea.distributed.netns import enter_namespace
        enter_namespace(cfg["netns"][rank])
    os.environ.update(cfg["env"])
    stacks.arm(cfg.get("stacks"), rank)     # the parent may ask for every thread's stack
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0")
    import torch
    import torch.distributed as dist
    torch.set_num_threads(cfg["threads"])
    init = dict(backend=cfg["backend"], rank=rank, world_size=world,
                timeout=datetime.timedelta(seconds=cfg["collective_timeout"]))
    if cfg["backend"] == "nccl":
        from milktea.device import rank_device
        init["device_id"] = device = rank_device("nccl", local_rank=rank, local_world=world)
        torch.cuda.set_device(device)
    dist.init_process_group(**init)


def send_error(conn, rank: int, e: BaseException) -> None:
    """Tell the parent how this rank failed (the exception itself too, where it pickles)."""
    tb = traceback.format_exc()
    try:
        original = pickle.dumps(e)
    except Exception:  # noqa: BLE001
        original = None
    with contextlib.suppress(Exception):
        _send(conn, ("error", rank, type(e).__name__, str(e), tb, original))


def run_worker(rank: int, world: int, conn, cfg: dict) -> None:
    """A rank's process: join the group, run the function, send back its result or error."""
    global _conn
    _conn = conn
    _die_with_parent()
    try:
        join_group(rank, world, cfg)
        import torch.distributed as dist
        fn, args, kwargs = pickle.loads(cfg["payload"])
        _beating.set()
        threading.Thread(target=_heartbeat, args=(conn, rank, threading.get_ident()),
                         name="milktea-heartbeat", daemon=True).start()
        result = fn(*args, **kwargs)
        _beating.clear()
        data = pickle.dumps(result) if (rank == 0 or cfg["results"] == "all") else None
        _send(conn, ("ok", rank, data))
        dist.destroy_process_group()
        conn.close()
        end_process(0)  # a normal exit can abort in gloo's threads: see end_process
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        send_error(conn, rank, e)
        conn.close()
        os._exit(1)  # skip atexit handlers that could block on a dead peer
    conn.close()
