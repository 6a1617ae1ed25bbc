"""A hung rank, named: which rank stopped making progress, and what it was doing.

Every rank tells how far it has got, twice a second (a heartbeat): its progress count
(`milktea.distributed.worker.progress()`), the innermost line of its main thread, and
whether it waits in a collective (a thread of it inside torch.distributed or inside
milktea's own collectives, `Comm`: the DDP hook's thread, while the main thread sits in
backward). Under `launch` the beats reach the parent through each rank's pipe; under
torchrun, `watch()` writes them into the process group's store.

When a rank stops, its peers wait for it in their next collective until it times out
(`collective_timeout`). The rank to name is then the one NOT waiting in a collective, then
the one with the fewest steps, then the one heard from longest ago:

    >>> beats = {0: Beat(), 1: Beat()}
    >>> beats[0].update(5, "comm.py:36 in _finish", waiting=True)
    >>> beats[1].update(5, "train.py:42 in step", waiting=False)
    >>> stopped(beats, [0, 1])
    1
    >>> timed_out("Timed out waiting 30000ms for recv operation to complete")
    True
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time

BEAT_EVERY_S = 0.5   # how often a rank tells how far it has got and where it is
STEPS = [0]          # this process's progress() count (milktea.distributed.worker.progress)

#: What a collective says when its peer never came: gloo's transports, NCCL's watchdog,
#: the store behind them.
_TIMEOUT = re.compile(r"Timed out waiting \d+ ?ms(?: for \w+ operation to complete)?|"
                      r"collective operation timeout|Socket Timeout|wait timeout after \d+ ?ms", re.IGNORECASE)


class WorkerHang(TimeoutError):
    """The run stopped making progress; `rank` is the rank that stopped first (not waiting
    in a collective, fewest steps, then the oldest news), `steps` every rank's progress count."""

    def __init__(self, message: str, rank: int | None, steps: dict):
        self.rank, self.steps = rank, steps
        self.others: dict[int, str] = {}
        super().__init__(message)

    def __reduce__(self):
        return (WorkerHang, (self.args[0], self.rank, self.steps))


def timed_out(message: str) -> bool:
    """Whether an error's text is a collective's (or its store's) timeout."""
    return bool(_TIMEOUT.search(message or ""))


def where(main_id: int | None) -> tuple[str, bool]:
    """(the innermost line of the thread `main_id`, whether this process waits in a
    collective): a frame of any thread but the caller's inside torch.distributed's Python code
    or inside milktea's `Comm` (whose thread waits there for a DDP bucket's exchange)."""
    frames = sys._current_frames()
    me, waiting, inner = threading.get_ident(), False, None
    for ident, frame in frames.items():
        depth = 0
        while frame is not None:
            # a frame another thread is building (torch's compiler swaps f_code while it runs)
            # may not hold a code object yet: its file is unknown, the walk goes on
            path = str(getattr(getattr(frame, "f_code", None), "co_filename", "?")).replace(os.sep, "/")
            if ident != me and ("torch/distributed/" in path or path.endswith("milktea/distributed/comm.py")):
                waiting = True
            if ident == main_id and depth == 0:
                name = getattr(getattr(frame, "f_code", None), "co_name", "?")
                inner = f"{os.path.basename(path)}:{getattr(frame, 'f_lineno', '?')} in {name}"
            frame, depth = frame.f_back, depth + 1
    return inner or "?", waiting


class Beat:
    """What is known of one rank's last heartbeat."""

    def __init__(self):
        self.steps, self.changed, self.heard = 0, time.monotonic(), None
        self.where, self.waiting = "starting up", False

    def update(self, steps: int, where: str, waiting: bool, age: float = 0.0,
               still_for: float | None = None) -> None:
        """A heartbeat, sent `age` seconds ago (by a rank whose count has stood still for
        `still_for` seconds, when it says so)."""
        now = time.monotonic()
        if steps != self.steps:
            self.steps, self.changed = steps, now - age
        if still_for is not None:
            self.changed = now - age - still_for
        self.heard, self.where, self.waiting = now - age, where, bool(waiting)

    def doing(self, now: float) -> str:
        if self.heard is None or now - self.heard > 10 * BEAT_EVERY_S + 5:
            return ("no heartbeat " + ("ever" if self.heard is None else f"for {now - self.heard:.0f} s") +
                    f" (holding the interpreter, or stopped; last seen at {self.where})")
        return ("waiting in a collective" if self.waiting else "busy") + f" at {self.where}"


def stopped(beats: dict, ranks) -> int:
    """The rank among `ranks` that stopped: not waiting in a collective, then the fewest
    steps, then the longest without news."""
    return min(ranks, key=lambda r: (beats[r].waiting, beats[r].steps, beats[r].heard or 0, r))


def describe(beats: dict, rank: int) -> str:
    """'rank R stopped making progress after S steps, T s ago: busy at ...; steps per rank: {...}'."""
    now, b = time.monotonic(), beats[rank]
    steps = {r: beats[r].steps for r in sorted(beats)}
    return (f"rank {rank} stopped making progress after {b.steps} steps, {now - b.changed:.0f} s ago: "
            f"{b.doing(now)}; steps per rank: {steps}")


def hang_error(where_from: str, beats: dict, rank: int, ending: str) -> WorkerHang:
    return WorkerHang(f"{where_from}: {describe(beats, rank)}. {ending}", rank,
                      {r: beats[r].steps for r in sorted(beats)})


def after_timeout(where_from: str, beats: dict, failed: int, message: str, candidates) -> WorkerHang | None:
    """A WorkerHang naming the rank that made rank `failed`'s collective time out (`message`:
    its error), chosen among `candidates` (ranks alive that reported no error of their own);
    None when the error is no collective's timeout or every candidate waits in a collective
    too (then the timeout itself is the news)."""
    candidates = [r for r in candidates if r != failed and r in beats]
    if not timed_out(message) or not candidates:
        return None
    rank = stopped(beats, candidates)
    if beats[rank].waiting and beats[rank].heard is not None:
        return None
    said = _TIMEOUT.search(message).group(0)
    return hang_error(where_from, beats, rank,
                      f"Rank {failed} waited for it in a collective until that timed out ({said})")


# --- under torchrun: beats through the process group's store ------------------------------
def _key(rank: int) -> str:
    return f"milktea/beat/{rank}"


@contextlib.contextmanager
def watch(store=None):
    """Under torchrun (or any script that initialised torch.distributed itself): publish this
    rank's heartbeat in the process group's store, and turn a collective's timeout inside
    the block into a `WorkerHang` naming the rank that stopped (read from the peers' beats)
    and what it was doing. Call `progress()` once per step inside.

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        with watch():
            train(...)      # a peer that stops: WorkerHang("rank 1 stopped making progress ...")
    """
    import torch.distributed as dist
    if store is None:
        store = dist.distributed_c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    main_id, done = threading.get_ident(), threading.Event()
    last = [STEPS[0], time.time()]          # the count, and when it last changed

    def beat():
        while not done.wait(BEAT_EVERY_S):
            spot, waiting = where(main_id)
            now, steps = time.time(), STEPS[0]
            if steps != last[0]:
                last[:] = [steps, now]
            with contextlib.suppress(Exception):   # a store that has gone: the run is ending anyway
                store.set(_key(rank), json.dumps([steps, spot, waiting, now, now - last[1]]))

    thread = threading.Thread(target=beat, name="milktea-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    except Exception as e:   # noqa: BLE001 - re-raised as it was unless it is a peer's hang
        hang = _peer_hang(store, rank, world, f"{type(e).__name__}: {e}")
        if hang is None:
            raise
        raise hang from e
    finally:
        done.set()


def _peer_hang(store, rank: int, world: int, message: str) -> WorkerHang | None:
    """The peers' beats, read from the store after this rank's collective failed with `message`."""
    beats, alive = {}, []
    for r in range(world):
        beats[r] = Beat()
        if r == rank:
            beats[r].update(STEPS[0], "a collective that timed out", True)
            continue
        with contextlib.suppress(Exception):
            if store.check([_key(r)]):
                steps, spot, waiting, at, still = json.loads(store.get(_key(r)))
                beats[r].update(steps, spot, waiting, age=max(0.0, time.time() - at), still_for=still)
                alive.append(r)
    return after_timeout(f"seen from rank {rank}", beats, rank, message, alive)
