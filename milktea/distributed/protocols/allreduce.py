"""Values that sum on the wire (dense, Cast): one all-reduce of the decoded values."""
from __future__ import annotations

import time

import torch

from milktea import cost, trace

from .base import Protocol, log, register


class AllReduce(Protocol):
    """Values that sum on the wire (Identity, Cast; and None: plain averaging).

    Hot path, per bucket: each item is divided by N (so fp16 cannot overflow in the sum),
    compressed (through its ledger with error feedback), decoded in place, and copied
    into one wire tensor of the compressor's `dtype` (fp16/bf16 for Cast: the decoded
    values are exactly representable in it); one all-reduce sums it; each item gets its
    slice back. Without a compressor (the DDP hook's dense parameters and buckets): one
    item is all-reduced where it is, several through one tensor of them all.
    """
    collective = "allreduce"

    def run(self, comm, items, step):
        if self.compressor is None:
            return self._mean(comm, items, step)
        if trace.ENABLED:
            trace.hop("allreduce")
        self._run(comm, items, step)

    def _mean(self, comm, items, step):
        """The items' mean over the ranks, uncompressed: divided by N, then summed."""
        flat = items[0].tensor.view(-1) if len(items) == 1 else torch.cat([it.tensor.view(-1) for it in items])
        flat.div_(self.world)
        if trace.ENABLED:
            trace.hop(f"allreduce: {len(items)} dense tensor{'s' * (len(items) != 1)}, "
                      f"{trace._size(flat.numel() * flat.element_size())}")
        if comm.log is not None:
            comm.log.add(step, payload_bytes=flat.numel() * flat.element_size())
        comm.all_reduce(flat, step)
        if len(items) > 1:
            off = 0
            for it in items:
                n = it.tensor.numel()
                it.tensor.view(-1).copy_(flat[off: off + n])
                off += n

    def _run(self, comm, items, step):
        t0 = time.perf_counter()
        N = self.world
        dtype = getattr(self.compressor, "dtype", None) or items[0].tensor.dtype
        low = torch.empty(sum(it.tensor.numel() for it in items), dtype=dtype, device=items[0].tensor.device)
        off = 0
        for it in items:
            x, c = it.tensor.div_(N), self.coder(it.name)
            if trace.ENABLED:
                trace.begin(it.name, x, c)
            if self.error_feedback and it.used:
                packet = self.ledger(it.name).step(c, x)
            else:
                packet = c.compress(x)
            if trace.ENABLED:
                trace.end(nbytes=x.numel() * low.element_size())     # what the all-reduce carries
            c.decompress(packet, out=x)             # exactly what was sent
            low[off: off + x.numel()].copy_(x.view(-1))
            off += x.numel()
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=low.numel() * low.element_size())
        comm.all_reduce(low, step)
        t0 = time.perf_counter()
        off = 0
        for it in items:
            it.tensor.view(-1).copy_(low[off: off + it.tensor.numel()])
            off += it.tensor.numel()
        log(comm, step, decode_s=time.perf_counter() - t0)

    def probe(self, tensors, link):
        dtype = getattr(self.compressor, "dtype", None) or tensors[0].dtype
        t0 = time.perf_counter()
        nbytes = 0
        for t in tensors:
            low = t.div(self.world).to(dtype)
            low.to(t.dtype)
            nbytes += low.numel() * low.element_size()
        return time.perf_counter() - t0, cost.ring_allreduce_time(nbytes, self.world, link)


register("allreduce", AllReduce)
