"""Packets that differ per rank: all-gathered as bytes, each rank decodes the mean."""
from __future__ import annotations

import copy
import time

import torch

from milktea import cost
from milktea.packet import Packet

from .base import Protocol, log, register

def _clears_in_pass(c) -> bool:
    """Whether the hook may let `c` zero the gradient in its ledger pass and then write the
    mean of sparse packets onto those zeros (saving a pass over the bucket): Top-K's,
    Random-K's and Chain's own methods, which take the keywords (a subclass's overrides
    may not)."""
    from milktea.compressors.base import Compressor
    from milktea.compressors.chain import Chain
    from milktea.compressors.sparse import Sparsifier
    t = type(c)
    def own_step(k):
        return k.compress_with_feedback is Sparsifier.compress_with_feedback and k._compress is Sparsifier._compress
    if isinstance(c, Chain):     # Top-K then a quantizer: its own step, through the first stage's
        own = (t.compress_with_feedback is Chain.compress_with_feedback and t._compress is Chain._compress
               and own_step(type(c.first)))
    else:
        own = isinstance(c, Sparsifier) and own_step(t)
    return (own and t.decompress_mean is Compressor.decompress_mean
            and t.decompress is Compressor.decompress and t.decompress_add is Compressor.decompress_add)


class AllGather(Protocol):
    """Packets that differ per rank (Top-K, quantizers, Sign, Chain).

    Hot path, per bucket: each item is compressed on its own (with error feedback: the
    gradient added to its ledger, which Top-K fuses with its selection's first pass over
    memory, zeroing the gradient in the same pass where the mean will land on zeros);
    the packets are laid end to end as one byte string per rank and
    all-gathered (sizes first); then each item is overwritten by the mean of the ranks'
    decoded packets (`decompress_mean`: rank 0's decoded, the others added in rank order,
    divided by N; a sparse packet's mean divides only the entries it touched). Nothing is
    re-quantized on the way, so every rank gets exactly mean_r decode(packet_r).
    """
    collective = "allgather"

    def run(self, comm, items, step):
        t0 = time.perf_counter()
        wire, cleared = [], set()
        for it in items:
            c = self.coder(it.name)
            if self.error_feedback and it.used:   # ledger += gradient, sent, crossed out
                if _clears_in_pass(c):   # the gradient zeroed as it is added: the mean lands on zeros
                    packet = self.ledger(it.name).step(c, it.tensor, clear_grad=True)
                    cleared.add(it.name)
                else:
                    packet = self.ledger(it.name).step(c, it.tensor)
            else:   # no ledger, or no gradient here: the ledger waits, a zero gradient is sent
                packet = c.compress(it.tensor)
            wire.append(packet.to_tensor())
        payload = torch.cat(wire)
        log(comm, step, compress_s=time.perf_counter() - t0)
        log(comm, step, payload_bytes=payload.numel())
        parts = comm.all_gather_bytes(payload, step)
        t0 = time.perf_counter()
        offsets = [0] * len(parts)
        for it in items:
            packets = []
            for r, part in enumerate(parts):
                packet = Packet.from_tensor(part[offsets[r]:])
                offsets[r] += packet.nbytes
                if packet.shape != tuple(it.tensor.shape):
                    raise ValueError(f"rank {r} sent a packet of shape {packet.shape} for {it.name}, "
                                     f"which has shape {tuple(it.tensor.shape)}")
                packets.append(packet)
            if it.name in cleared:
                self.coders[it.name].decompress_mean(packets, out=it.tensor, zeroed=True)
            else:
                self.coders[it.name].decompress_mean(packets, out=it.tensor)
        log(comm, step, decode_s=time.perf_counter() - t0)

    def probe(self, tensors, link):
        c, N = copy.deepcopy(self.compressor), self.world
        t0 = time.perf_counter()
        packets = [c.compress(t) for t in tensors]
        t1 = time.perf_counter()
        for t, p in zip(tensors, packets):
            out = torch.empty_like(t)
            c.decompress(p, out=out)
            for _ in range(N - 1):
                c.decompress_add(p, out)
        t2 = time.perf_counter()
        nbytes = sum(p.nbytes for p in packets)
        return (t1 - t0) + (t2 - t1), cost.allgather_time(8, N, link) + cost.allgather_time(nbytes, N, link)


register("allgather", AllGather)
