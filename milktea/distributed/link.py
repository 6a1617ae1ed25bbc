"""An emulated slow link: every collective takes at least what the link would take.

    from milktea.distributed.link import EmulatedLink
    link = EmulatedLink.gbit(1)                  # 1 Gbit/s, 50 us per message
    state = milktea.ddp.compress(model, TopK(0.01), link=link)

The real collective runs (on loopback it is fast), then the caller sleeps until the
time the cost model gives for the bytes really sent (`milktea.cost.comm_time`), counted
on a per-process timeline of the link: a collective starts when it is issued and the
link is free, so queued collectives wait for each other as on a real wire. No
privileges needed. `settle` is the one place where a collective is waited for, slowed
down to the link and logged: milktea's `Comm` and PyTorch's own hooks (inside
`torch_hooks_through(link)`, which routes their all-reduces here while it lasts) both go
through it.
"""
from __future__ import annotations

import contextlib
import threading
import time

from milktea import cost


class EmulatedLink:
    """A link of `bandwidth` bytes/s and `latency` seconds per message (a `cost.Link`),
    imposed on collectives. One instance per process; hooks in that process share it."""

    def __init__(self, link: "cost.Link"):
        if not isinstance(link, cost.Link):
            raise TypeError(f"link must be a milktea.cost.Link (e.g. Link.gbit(1)), got {type(link).__name__}")
        self.link = link
        self._lock = threading.Lock()
        self._free_at = 0.0

    def __getstate__(self):   # picklable (sent to workers); the timeline starts afresh there
        return {"link": self.link}

    def __setstate__(self, state):
        self.__init__(state["link"])

    @classmethod
    def gbit(cls, gbit_per_s: float, latency: float = 50e-6) -> "EmulatedLink":
        return cls(cost.Link.gbit(gbit_per_s, latency))

    def predict(self, collective: str, nbytes: float, workers: int) -> float:
        """Seconds the link needs for one collective (`milktea.cost.comm_time`: "allreduce":
        nbytes summed by a ring; "allgather": nbytes from each worker; "alltoall": nbytes
        to each peer)."""
        return cost.comm_time(nbytes, workers, self.link, collective)

    def occupy(self, issued: float, seconds: float) -> float:
        """Book the link for `seconds` from `issued` (or from when it is free); return the end."""
        with self._lock:
            start = max(issued, self._free_at)
            self._free_at = start + seconds
            return self._free_at

    def __repr__(self) -> str:
        return f"EmulatedLink({self.link!r})"


def settle(work, collective: str, nbytes: int, workers: int, link: EmulatedLink | None = None, log=None,
           step: int = 0, issued: float = 0.0, end: float | None = None,
           seconds: float | None = None) -> tuple[float, float]:
    """The one wait for a collective: torch's `work` (None: done already), issued at
    `issued`, moving `nbytes` per rank with `collective` over `workers` ranks; then the
    emulated link's time for it (`link.predict`, or `seconds` where the caller prices a
    collective the cost model's `comm_time` does not name, such as FSDP's reduce-scatter;
    booked on the link's timeline from `issued`, unless `end` says when it was booked to
    end), and its bytes and seconds in `log` (a StatsLog) under `step`. Returns (seconds
    since `issued`, the link's seconds: 0 without a link)."""
    predicted = 0.0
    if link is not None:
        predicted = link.predict(collective, nbytes, workers) if seconds is None else seconds
        if end is None:
            end = link.occupy(issued, predicted)
    if work is not None:
        work.wait()
    if link is not None:
        left = end - time.perf_counter()
        if left > 0:
            time.sleep(left)
    comm_s = time.perf_counter() - issued
    if log is not None:
        log.add(step, comm_s=comm_s, wire_bytes=cost.wire_bytes(nbytes, workers, collective),
                predicted_comm_s=predicted, collectives=1, op=(collective, nbytes))
    return comm_s, predicted


class Pending:
    """A collective in flight, waited for through `settle` (by `wait()`, or by the future
    `get_future()` returns): what `torch_hooks_through` hands PyTorch's hooks for their
    asynchronous all-reduces."""

    def __init__(self, work, collective: str, nbytes: int, workers: int, link: EmulatedLink | None = None,
                 log=None, step: int = 0, issued: float | None = None):
        self.work, self.args = work, (collective, nbytes, workers, link, log, step)
        self.issued = time.perf_counter() if issued is None else issued
        # booked now, when it is issued: collectives queue on the link in the order they are issued
        self.end = link.occupy(self.issued, link.predict(collective, nbytes, workers)) if link is not None else 0.0
        self._done = False

    def _finished(self) -> None:
        if not self._done:
            self._done = True
            settle(None, *self.args, issued=self.issued, end=self.end)

    def wait(self, timeout=None) -> bool:
        self.work.wait()
        self._finished()
        return True

    def is_completed(self) -> bool:
        return self.work.is_completed() and time.perf_counter() >= self.end

    def get_future(self):
        def slow(fut):
            self._finished()
            return fut.value()
        return self.work.get_future().then(slow)


class _DistProxy:
    """Stands in for `torch.distributed` inside PyTorch's hook modules while
    `torch_hooks_through` lasts: all_reduce goes through the active route's link and log;
    everything else, and all other code, is untouched."""

    def __init__(self, real):
        self._real = real
        self.active = None   # (link, log, step function) of the PyTorch hook now running

    def __getattr__(self, name):
        return getattr(self._real, name)

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        real = self._real
        op = real.ReduceOp.SUM if op is None else op
        if self.active is None:
            return real.all_reduce(tensor, op=op, group=group, async_op=async_op)
        link, log, step = self.active
        issued = time.perf_counter()
        work = real.all_reduce(tensor, op=op, group=group, async_op=True)
        nbytes = tensor.numel() * tensor.element_size()
        s = step()
        if log is not None:
            log.add(s, payload_bytes=nbytes)
        pending = Pending(work, "allreduce", nbytes, real.get_world_size(group), link, log, s, issued)
        if async_op:
            return pending
        pending.wait()
        return None


_patch = {"users": 0, "saved": None, "proxy": None}
_patch_lock = threading.Lock()


@contextlib.contextmanager
def torch_hooks_through(link: EmulatedLink | None, log=None, step=lambda: 0):
    """While the block lasts, the all-reduces of PyTorch's own DDP hooks (fp16, bf16,
    PowerSGD) go through `link` and are counted in `log` (a StatsLog): bytes, and the time
    from issue until the result (and the link) is ready. It puts a stand-in for
    `torch.distributed` in their modules (`default_hooks.dist`, `powerSGD_hook.dist`) and
    puts the real one back when the last such block ends; other code is not affected.
    Yields the stand-in (its `active` route can be switched per model)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    with _patch_lock:
        if _patch["users"] == 0:
            _patch["saved"] = (default_hooks.dist, powerSGD_hook.dist)
            _patch["proxy"] = proxy = _DistProxy(dist)
            default_hooks.dist = powerSGD_hook.dist = proxy
        _patch["users"] += 1
        proxy = _patch["proxy"]
    before, proxy.active = proxy.active, (link, log, step)
    try:
        yield proxy
    finally:
        proxy.active = before
        with _patch_lock:
            _patch["users"] -= 1
            if _patch["users"] == 0:
                default_hooks.dist, powerSGD_hook.dist = _patch["saved"]
                _patch["proxy"] = _patch["saved"] = None


emulate_torch_collectives = torch_hooks_through      # the name it had
