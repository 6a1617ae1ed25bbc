"""Ranks that stay up between jobs: many short distributed runs without starting processes.

    from milktea.distributed import Pool
    from milktea.distributed.examples import allreduce_sum
    with Pool(2) as pool:                  # two ranks start and join a process group, once
        pool.run(allreduce_sum)            # == launch(allreduce_sum, 2), on the ranks already up
        pool.run(allreduce_sum)            # the same processes again

A job sees what a launched function sees (torch.distributed initialised, RANK and WORLD_SIZE
set, `report()` and `progress()` working) and starts as a fresh process would wherever the pool
can reset it: torch's default random generator, the thread count, the library's language.
What a job leaves in module globals or new process groups stays for the next one; a job that
must start clean (testing a restart, say) belongs to `launch`. When a job fails, dies, stalls
or passes its timeout, `run` raises as `launch` does, naming the rank, and the pool's ranks
are stopped; the next job starts them again.
"""
from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from typing import Any, Callable

import milktea.distributed.launch  # noqa: F401 - the module, not the function of the same name
from milktea.distributed import worker as W
from milktea.distributed.hang import where

L = sys.modules["milktea.distributed.launch"]   # launch's parent side, shared


class Pool:
    """`nprocs` worker ranks kept running; `run(fn, ...)` takes what `launch` takes."""

    def __init__(self, nprocs: int = 2, *, backend: str = "auto", threads: int | None = None,
                 collective_timeout: float = 300.0, env: dict | None = None):
        if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
            raise ValueError(f"nprocs must be a positive int, got {nprocs!r}")
        self.nprocs, self._options = nprocs, (backend, threads, env, collective_timeout)
        self._procs, self._conns, self._jobs = [], [], []
        self._stacks: str | None = None   # where the ranks write their threads' stacks (stacks.py)
        self.starts = 0   # how many times the ranks were started (1 unless a job failed)

    def __repr__(self) -> str:
        state = "up" if self._procs else "down"
        return f"Pool({self.nprocs} ranks, {state}, started {self.starts}x)"

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        backend, threads, env, collective_timeout = self._options
        cfg = L.worker_config(self.nprocs, backend, threads, env, collective_timeout)
        self._stacks = cfg["stacks"]
        import multiprocessing as mp
        for rank in range(self.nprocs):
            jobs_out, jobs_in = mp.get_context("spawn").Pipe(duplex=False)
            p, conn = L.start_worker(_serve, rank, self.nprocs, cfg, jobs_out)
            jobs_out.close()
            self._procs.append(p)
            self._conns.append(conn)
            self._jobs.append(jobs_in)
        self.starts += 1

    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None, *, results: str = "rank0",
            timeout: float | None = None, on_message: Callable[[int, Any], None] | None = None,
            stall_timeout: float | None = None) -> Any:
        """Run fn(*args, **kwargs) on every rank; return rank 0's result (`results="all"`: the
        list of every rank's). Raises WorkerError / WorkerHang / TimeoutError as `launch` does."""
        L._check_function(fn)
        if results not in ("rank0", "all"):
            raise ValueError(f"results must be 'rank0' or 'all', not {results!r}")
        try:
            payload = pickle.dumps((fn, tuple(args), dict(kwargs or {})))
        except Exception as e:
            raise TypeError(f"the pool could not pickle the function or its arguments ({e}); use a "
                            "module-level function and plain arguments") from e
        if not self._procs:
            self._start()
        deadline = None if timeout is None else time.monotonic() + timeout
        out: dict[int, Any] = {}
        try:
            for jobs in self._jobs:
                jobs.send((payload, results))
            failure = L._supervise(self._procs, self._conns, out, on_message, deadline, timeout, stall_timeout,
                                   stacks_dir=self._stacks)
        except BaseException:
            self._stop()
            raise
        if failure is not None:
            self._stop()
            raise failure
        return out[0] if results == "rank0" else [out[r] for r in range(self.nprocs)]

    def close(self) -> None:
        """Let the ranks leave the process group and exit (stopped if they do not, in a few s)."""
        for jobs in self._jobs:
            try:
                jobs.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        self._stop()

    def _stop(self) -> None:
        L._stop(self._procs)
        for c in self._conns + self._jobs:
            c.close()
        self._procs, self._conns, self._jobs = [], [], []
        L.stacks.remove(self._stacks)
        self._stacks = None


def _beat(conn, rank: int, main_id: int) -> None:
    """Tell the parent this rank's progress twice a second while a job runs (as launch does)."""
    while True:
        time.sleep(W.BEAT_EVERY_S)
        if W._beating.is_set():
            spot, waiting = where(main_id)
            try:
                W._send(conn, ("beat", rank, W._steps[0], spot, waiting))
            except (OSError, ValueError):
                return


def _serve(rank: int, world: int, conn, cfg: dict, jobs) -> None:
    """A pool rank: join the group once, then run jobs until the parent sends None."""
    W._conn = conn   # report() and progress() inside a job
    W._die_with_parent()
    try:
        W.join_group(rank, world, cfg)
        import torch
        import torch.distributed as dist
        fresh_rng = torch.get_rng_state()
        threading.Thread(target=_beat, args=(conn, rank, threading.get_ident()),
                         name="milktea-heartbeat", daemon=True).start()
        while (job := jobs.recv()) is not None:
            payload, results = job
            torch.set_rng_state(fresh_rng)              # as a fresh process would start
            torch.set_num_threads(cfg["threads"])
            if "milktea.i18n" in sys.modules:
                sys.modules["milktea.i18n"].use(os.environ.get("MILKTEA_LANG") or "en")
            W._steps[0] = 0
            fn, args, kwargs = pickle.loads(payload)
            W._beating.set()
            result = fn(*args, **kwargs)
            W._beating.clear()
            data = pickle.dumps(result) if (rank == 0 or results == "all") else None
            W._send(conn, ("ok", rank, data))
        dist.destroy_process_group()
        conn.close()
        W.end_process(0)  # a normal exit can abort in gloo's threads: see worker.end_process
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        W.send_error(conn, rank, e)
        conn.close()
        os._exit(1)
