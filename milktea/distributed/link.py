"""An emulated slow link: every collective takes at least what the link would take.

    from milktea.distributed.link import EmulatedLink
    link = EmulatedLink.gbit(1)                  # 1 Gbit/s, 50 us per message
    state = milktea.ddp.compress(model, TopK(0.01), link=link)

The real collective runs (on loopback it is fast), then the caller sleeps until the
time the cost model gives for the bytes really sent, counted on a per-process timeline
of the link: a collective starts when it is issued and the link is free, so queued
collectives wait for each other as on a real wire. No privileges needed.
For PyTorch's own hooks (which call `torch.distributed.all_reduce` themselves),
`emulate_torch_collectives(link)` routes their calls (and only theirs) through the same link.
"""
from __future__ import annotations

import contextlib
import threading
import time

from milktea import cost


def allreduce_wire_bytes(nbytes: float, workers: int) -> float:
    return 2 * (workers - 1) / workers * nbytes if workers > 1 else 0.0


def allgather_wire_bytes(nbytes_per_worker: float, workers: int) -> float:
    return (workers - 1) * nbytes_per_worker


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
        """Seconds the link needs for one collective ("allreduce": nbytes summed by a ring;
        "allgather": nbytes from each worker)."""
        if collective == "allreduce":
            return cost.ring_allreduce_time(nbytes, workers, self.link)
        if collective == "allgather":
            return cost.allgather_time(nbytes, workers, self.link)
        raise ValueError(f"collective must be 'allreduce' or 'allgather', got {collective!r}")

    def occupy(self, issued: float, seconds: float) -> float:
        """Book the link for `seconds` from `issued` (or from when it is free); return the end."""
        with self._lock:
            start = max(issued, self._free_at)
            self._free_at = start + seconds
            return self._free_at

    @staticmethod
    def wait_until(end: float) -> None:
        left = end - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def __repr__(self) -> str:
        return f"EmulatedLink({self.link!r})"


class _SlowWork:
    """Wraps a torch.distributed Work so that waiting on it also waits for the link."""

    def __init__(self, work, end: float, done=None):
        self._work, self._end, self._done = work, end, done

    def _finished(self):
        EmulatedLink.wait_until(self._end)
        if self._done is not None:
            self._done()

    def wait(self, timeout=None):
        self._work.wait()
        self._finished()
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed() and time.perf_counter() >= self._end

    def get_future(self):
        def slow(fut):
            self._finished()
            return fut.value()
        return self._work.get_future().then(slow)


class _DistProxy:
    """Stands in for `torch.distributed` inside PyTorch's hook modules only: all_reduce goes
    through the active link and log; everything else, and all other code, is untouched."""

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
        workers = real.get_world_size(group)
        nbytes = tensor.numel() * tensor.element_size()
        predicted = link.predict("allreduce", nbytes, workers) if link is not None else 0.0
        end = link.occupy(issued, predicted) if link is not None else issued
        s = step()
        done = None
        if log is not None:
            log.add(s, payload_bytes=nbytes, wire_bytes=allreduce_wire_bytes(nbytes, workers),
                    predicted_comm_s=predicted, collectives=1, op=("allreduce", nbytes))
            done = lambda: log.add(s, comm_s=time.perf_counter() - issued)  # noqa: E731
        slow = _SlowWork(work, end, done)
        if async_op:
            return slow
        slow.wait()
        return None


_proxy: _DistProxy | None = None


def torch_hook_proxy() -> _DistProxy:
    """Install (once) the proxy as `dist` in PyTorch's default_hooks and powerSGD_hook."""
    global _proxy
    if _proxy is None:
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        _proxy = _DistProxy(dist)
        default_hooks.dist = _proxy
        powerSGD_hook.dist = _proxy
    return _proxy


@contextlib.contextmanager
def emulate_torch_collectives(link: EmulatedLink | None, log=None, step=lambda: 0):
    """Inside the block, the all-reduces of PyTorch's own DDP hooks (fp16, bf16, PowerSGD)
    go through `link` and are counted in `log` (a StatsLog): bytes, and the time from
    issue until the result (and the link) is ready. Other code is not affected."""
    proxy = torch_hook_proxy()
    before, proxy.active = proxy.active, (link, log, step)
    try:
        yield proxy
    finally:
        proxy.active = before
