"""Run one function on N local worker processes joined by torch.distributed.

    from milktea.distributed import launch
    from milktea.distributed.examples import allreduce_sum
    launch(allreduce_sum, nprocs=2)          # -> what rank 0 returned

The function must live in an importable module (not in a notebook cell): each worker
is a fresh Python process that imports it. Inside it, `torch.distributed` is already
initialised (gloo on CPU, NCCL when every rank can have its own GPU), RANK/WORLD_SIZE/
LOCAL_RANK are set as torchrun would set them, and the thread count is cores // N.

If a rank raises or dies, the others are stopped at once and the parent raises
`WorkerError` naming that rank (a rank killed by a signal is named, not the peer that
then lost its connection), with its traceback. A rank that stops making progress (see
`progress()` in milktea.distributed.worker, the side that runs in each rank) is named
too, with what it was doing (milktea.distributed.hang): as soon as a peer's collective
times out waiting for it (`collective_timeout`, plus a second), or earlier with
`stall_timeout`, when some rank has made no progress for that long. Either way
`WorkerHang` names the rank not waiting in a collective, not the peers left waiting.
No worker is left running.
From the shell:  python -m milktea.distributed -n 2 milktea.distributed.examples:allreduce_sum
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import pickle
import signal
import sys
import time
from typing import Any, Callable

from milktea.distributed import stacks
from milktea.distributed.ports import free_port
from milktea.distributed.hang import Beat, WorkerHang, after_timeout, hang_error, stopped, timed_out
from milktea.distributed.worker import run_worker
from milktea.threads import per_rank



class WorkerError(RuntimeError):
    """A worker rank failed. `rank`, `exc_type`, `remote_traceback`, and `original`
    (the exception object itself when it could be sent back, else None)."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str = "",
                 original: BaseException | None = None):
        self.rank, self.exc_type, self.message = rank, exc_type, message
        self.remote_traceback, self.original = remote_traceback, original
        self.others: dict[int, str] = {}   # with launch(grace=...): how each other rank ended
        text = f"rank {rank} failed: {exc_type}: {message}"
        if remote_traceback:
            text += f"\n\n--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(text)

    def __reduce__(self):
        return (WorkerError, (self.rank, self.exc_type, self.message, self.remote_traceback))


def pick_backend(nprocs: int, backend: str = "auto", prefer: str | None = None) -> str:
    """The backend for `nprocs` local ranks (`milktea.device.backend_for_ranks`)."""
    from milktea.device import backend_for_ranks
    return backend_for_ranks(nprocs, backend, prefer=prefer)


def _check_function(fn: Callable) -> bytes:
    if not callable(fn):
        raise TypeError(f"launch needs a function, got {type(fn).__name__}")
    main = sys.modules.get("__main__")
    if getattr(fn, "__module__", None) == "__main__" and not getattr(main, "__file__", None):
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} is defined in a notebook or an "
                        "interactive session; worker processes cannot import it. Put it in a "
                        ".py module (e.g. my_workers.py beside the notebook) and import it from there")
    return fn


def _stop(procs: list, grace: float = 3.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


@contextlib.contextmanager
def _environ(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch(fn: Callable, nprocs: int = 2, args: tuple = (), kwargs: dict | None = None, *,
           backend: str = "auto", results: str = "rank0", timeout: float | None = None,
           collective_timeout: float = 300.0, threads: int | None = None,
           on_message: Callable[[int, Any], None] | None = None, env: dict | None = None,
           netns=None, stall_timeout: float | None = None, grace: float = 0.0) -> Any:
    """Run `fn(*args, **kwargs)` on `nprocs` ranks; return rank 0's result
    (`results="all"`: the list of every rank's result).

    timeout: seconds for the whole run (None: no limit) before every worker is killed
    and TimeoutError raised. collective_timeout: how long a collective may wait for a
    peer (the DDP hook's own process group too); when one times out because a peer
    stopped, `WorkerHang` names that peer and what it was doing, about a second later.
    on_message(rank, obj) receives what workers send with `report(obj)`.
    stall_timeout: once the ranks have called `progress()`, stop the run when one of them
    has made no progress for this many seconds, raising `WorkerHang` that names it (keep
    it below collective_timeout, else the waiting peer's timeout error comes first).
    netns: a `milktea.distributed.netns.NetnsLink` to run each rank in its own network namespace.
    grace: when a rank fails, how many seconds the others get to end on their own (save
    their state, report what they saw) before they are stopped; how each ended is in the
    raised WorkerError's `others` ({rank: "returned" / "ExcType: message" / "stopped"}).
    """
    _check_function(fn)
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
    if results not in ("rank0", "all"):
        raise ValueError(f"results must be 'rank0' or 'all', not {results!r}")
    if netns is not None and netns.workers != nprocs:
        raise ValueError(f"the network namespaces were built for {netns.workers} ranks, not {nprocs}")
    try:
        payload = pickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as e:
        raise TypeError(f"launch could not pickle the function or its arguments ({e}); use a "
                        "module-level function and plain arguments") from e
    cfg = worker_config(nprocs, backend, threads, env, collective_timeout, netns)
    cfg.update(payload=payload, results=results)
    procs, conns = [], []
    out: dict[int, Any] = {}
    failure: WorkerError | None = None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for rank in range(nprocs):
            p, parent_end = start_worker(run_worker, rank, nprocs, cfg)
            procs.append(p)
            conns.append(parent_end)
        failure = _supervise(procs, conns, out, on_message, deadline, timeout, stall_timeout, grace,
                             stacks_dir=cfg["stacks"])
    finally:
        _stop(procs)
        for c in conns:
            c.close()
        stacks.remove(cfg["stacks"])
    if failure is not None:
        raise failure
    return out[0] if results == "rank0" else [out[r] for r in range(nprocs)]


def worker_config(nprocs: int, backend: str, threads: int | None, env: dict | None,
                  collective_timeout: float, netns=None) -> dict:
    """What every worker needs to join the process group (launch's and Pool's alike)."""
    threads = threads or per_rank(local_world=nprocs)
    child_env = {k: str(v) for k, v in (env or {}).items()}
    if netns is not None:
        child_env.update(netns.worker_env())
    else:
        child_env.setdefault("MASTER_ADDR", "127.0.0.1")
        child_env.setdefault("MASTER_PORT", str(free_port(child_env["MASTER_ADDR"])))
    return dict(backend=pick_backend(nprocs, backend, prefer=child_env.get("MILKTEA_DEVICE")), threads=threads,
                env=child_env,
                collective_timeout=collective_timeout, stacks=stacks.make_dir(),
                netns=netns.namespaces if netns is not None else None)


def start_worker(target: Callable, rank: int, nprocs: int, cfg: dict, *extra):
    """Start rank `rank` as a fresh interpreter running target(rank, nprocs, conn, cfg, *extra);
    return the process and the parent's end of its pipe."""
    ctx = mp.get_context("spawn")
    # set at the interpreter's start: torch reads them at import, and numba's OpenMP threads
    # (NUMBA_NUM_THREADS) otherwise spin after every kernel and slow torch's backward
    n = str(cfg["threads"])
    with _environ({"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "NUMBA_NUM_THREADS": n, **cfg["env"]}):
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(rank, nprocs, child_end, cfg, *extra), name=f"milktea-rank{rank}")
        p.start()
    child_end.close()
    return p, parent_end


def _supervise(procs, conns, out, on_message, deadline, timeout, stall_timeout,
               grace: float = 0.0, stacks_dir: str | None = None) -> WorkerError | WorkerHang | None:
    """Wait for every rank's result in `out`; return the first rank's failure (None if all
    returned; with `grace`, the others' endings in its `others`), or a WorkerHang naming the
    peer it waited for when that failure is a collective's timeout; raise WorkerHang on a stall.
    After a collective's timeout, the error ends with the threads of the ranks still running
    (`milktea.distributed.stacks`, from the folder `stacks_dir` the workers write into)."""
    live = set(range(len(procs)))
    beats = {r: Beat() for r in live}
    started = False
    while live:
        wait_s = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        ready = mpc.wait([conns[r] for r in live] + [procs[r].sentinel for r in live], timeout=wait_s)
        failure = _check(ready, procs, conns, live, out, on_message, beats)
        if failure is not None:
            heard: dict = {}
            failure = _root_cause(failure, procs, conns, live, out, on_message, beats, heard=heard)
            silent = [r for r in live if r not in heard and procs[r].is_alive()]
            threads = ""
            if timed_out(failure.message):     # what was every rank doing? (before anything is stopped)
                threads = stacks.describe(stacks.collect(stacks_dir, {r: procs[r].pid for r in silent}))
            # a collective that timed out: its peer stopped; name that one if it is alive and silent
            hang = after_timeout("launch", beats, failure.rank, f"{failure.exc_type}: {failure.message}", silent)
            if hang is not None:
                if grace > 0:   # the others may still save their state, as after a failure
                    hang.others = _wind_down(hang.rank, grace, procs, conns, live, out, on_message, beats, heard)
                hang.args = (hang.args[0] + "; all workers were stopped" + threads,)
                return hang
            if grace > 0:
                failure.others = _wind_down(failure.rank, grace, procs, conns, live, out, on_message, beats, heard)
                failure.args = (failure.args[0] + "\n\nthe other ranks: " + "; ".join(
                    f"rank {r} {how}" for r, how in failure.others.items()),)
            if threads:
                failure.args = (failure.args[0] + threads,)
            return failure
        now = time.monotonic()
        if not started and any(b.steps for b in beats.values()):
            started = True   # the stall clock starts at the first progress of any rank
            for b in beats.values():
                b.changed = max(b.changed, now) if b.steps == 0 else b.changed
        stalled = stall_timeout is not None and started and \
            any(now - beats[r].changed > stall_timeout for r in live)
        if stalled or (deadline is not None and now >= deadline):
            raise _hang(beats, live, stall_timeout if stalled else timeout, stalled)
    return None


def _check(ready, procs, conns, live, out, on_message, beats) -> WorkerError | None:
    """Read the ready pipes; sentinels first, so that a rank that died (e.g. SIGKILL)
    is named before a peer's report of the connection it lost."""
    dead = [r for r in sorted(live) if procs[r].sentinel in ready]
    for rank in dead:
        failure = _drain(rank, conns[rank], out, on_message, live, beats)
        if failure is None and rank in live:   # died without a result or an error
            procs[rank].join(1.0)
            return _exit_error(rank, procs[rank].exitcode)
        if failure is not None:
            return failure
    for rank in sorted(live):
        if conns[rank] in ready:
            failure = _drain(rank, conns[rank], out, on_message, live, beats)
            if failure is not None:
                return failure
    return None


def _root_cause(failure, procs, conns, live, out, on_message, beats, grace: float = 1.0, heard=None):
    """A rank's error is often the echo of another's death (its connection reset): wait
    a moment, and name a rank that died without a word (killed, crashed) instead."""
    heard = {} if heard is None else heard       # rank -> its own error, as it arrives
    if failure.exc_type == "ProcessExit":
        return failure
    heard[failure.rank] = failure
    deadline, spoke = time.monotonic() + grace, {failure.rank}
    while time.monotonic() < deadline:
        for r in [r for r in live if r not in spoke]:
            if not procs[r].is_alive():
                error = _drain(r, conns[r], out, on_message, live, beats)
                if error is not None:
                    heard[r] = error
                    spoke.add(r)   # it failed with an error of its own: an echo, most likely
                elif r in live:    # gone with no result and no error
                    procs[r].join(1.0)
                    return _exit_error(r, procs[r].exitcode)
        time.sleep(0.05)
    return failure


def _wind_down(failed: int, grace: float, procs, conns, live, out, on_message, beats, heard) -> dict:
    """After rank `failed` failed: give the other live ranks up to `grace` seconds to end on
    their own; how each one ended (`heard`: errors already read, by rank)."""
    ended, deadline = {}, time.monotonic() + grace
    for r, error in heard.items():
        if r != failed:
            ended[r] = f"{error.exc_type}: {error.message}"
    for r in range(len(procs)):
        if r != failed and r not in live and r not in ended:
            ended[r] = "returned"
    waiting = [r for r in live if r != failed and r not in ended]
    while waiting and time.monotonic() < deadline:
        for r in list(waiting):
            error = _drain(r, conns[r], out, on_message, live, beats)
            if error is not None:
                ended[r] = f"{error.exc_type}: {error.message}"
            elif r not in live:
                ended[r] = "returned"
            elif not procs[r].is_alive():
                ended[r] = f"exited with code {procs[r].exitcode}"
            else:
                continue
            waiting.remove(r)
        time.sleep(0.05)
    ended.update({r: "stopped" for r in waiting})
    return dict(sorted(ended.items()))


def _hang(beats, live, limit, stalled) -> WorkerHang:
    """The run's time limit or the stall check: name the rank that stopped (hang.stopped)."""
    what = "no progress" if stalled else "the run's time limit"
    return hang_error("launch", beats, stopped(beats, live),
                      f"Stopped after {limit:g} s ({what}); all workers were stopped")


def _exit_error(rank: int, code: int | None) -> WorkerError:
    hint = ""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            hint = f" (killed by {signal.Signals(-code).name})"
    if code == 1:  # what a failed bootstrap of a spawned interpreter returns
        hint = (" (its output above says why; a script that calls launch() must guard it "
                "with `if __name__ == '__main__':`)")
    return WorkerError(rank, "ProcessExit", f"exited with code {code} before returning a result{hint}")


def _drain(rank, conn, out, on_message, live, beats) -> WorkerError | None:
    """Read everything rank has sent so far; return its error if it sent one."""
    try:
        while conn.poll():
            msg = conn.recv()
            if msg[0] == "beat":
                beats[rank].update(*msg[2:])
            elif msg[0] == "msg":
                if on_message is not None:
                    on_message(msg[1], msg[2])
            elif msg[0] == "ok":
                out[rank] = pickle.loads(msg[2]) if msg[2] is not None else None
                live.discard(rank)
            else:
                _, r, exc_type, message, tb, original = msg
                orig = None
                with contextlib.suppress(Exception):
                    orig = pickle.loads(original) if original else None
                return WorkerError(r, exc_type, message, tb, orig)
    except (EOFError, OSError):
        pass
    return None


def _load(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"give the function as package.module:function, not {spec!r}")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m milktea.distributed", description=__doc__.split("\n")[0])
    ap.add_argument("function", help="package.module:function to run on every rank")
    ap.add_argument("-n", "--nproc", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    ap.add_argument("--timeout", type=float, default=None, help="seconds for the whole run")
    ap.add_argument("--all", action="store_true", help="print every rank's result, not only rank 0's")
    a = ap.parse_args(argv)
    try:
        res = launch(_load(a.function), a.nproc, backend=a.backend, timeout=a.timeout,
                     results="all" if a.all else "rank0")
    except WorkerError as e:
        print(e, file=sys.stderr)
        raise SystemExit(1) from None
    print(res)


if __name__ == "__main__":
    main()
