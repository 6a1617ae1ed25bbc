"""Packets that differ per rank: all-gathered as bytes, each rank decodes the mean."""
from __future__ import annotations

import copy
import time

import torch

from milktea import cost, trace
from milktea.checks import check_grad
from milktea.compressors.codec import lookup
from milktea.compressors.packet import read
from milktea.compressors.registry import decode_mean

from .base import Protocol, register


class AllGather(Protocol):
    """Packets that differ per rank (Top-K, quantizers, Sign, Chain).

    Hot path, per bucket: each item is encoded on its own (with error feedback,
    `Ledger.step`: the gradient added to its ledger, which Top-K does in its selection's
    first pass over memory, zeroing the gradient in the same pass where the mean will land
    on zeros); this rank's packets are laid out as one byte string, their parts first,
    written into the send buffer the `Comm` keeps (int8 codes and sign bits are made
    there: `encode`'s `into`), then their headers; all-gathered (sizes first); then each
    item is overwritten by the mean of the ranks' packets (`decode_mean`: rank 0's
    decoded, the others added in rank order, divided by N; a sparse packet's mean divides
    only the entries it touched). Nothing is re-quantized on the way, so every rank gets
    exactly mean_r decode(packet_r).
    """
    collective = "allgather"

    def __init__(self, compressor, error_feedback: bool = False, rank: int = 0, world: int = 1):
        super().__init__(compressor, error_feedback, rank, world)
        #: packets that list their positions: the gradient is zeroed as it enters the ledger,
        #: and the mean lands on those zeros (one pass over the bucket less)
        self.sparse = lookup(compressor.codec).sparse is not None

    def run(self, comm, items, step):
        if trace.ENABLED:
            trace.hop("allgather")
        t0 = time.perf_counter()
        payload, tail, cleared = self.encode(items, comm)
        t1 = time.perf_counter()
        parts, heads = comm.all_gather_tailed(payload, tail, step)
        if trace.ENABLED:
            trace.hop(f"all-gather of {len(parts)} ranks' packets")
            trace.hop("decode_mean")
        t2 = time.perf_counter()
        self.decode(items, parts, heads, cleared)
        if comm.log is not None:
            comm.log.add(step, compress_s=t1 - t0, payload_bytes=payload.numel(), decode_s=time.perf_counter() - t2)

    def encode(self, items, comm) -> tuple[torch.Tensor, int, set]:
        """This rank's packets for the items as one byte string in `comm`'s send buffer:
        every packet's parts, then every packet's header (their length: the second value);
        and the names of the items whose gradient was zeroed on its way into the ledger."""
        dev = items[0].tensor.device
        grow = getattr(comm, "send_buffer", None) or _Grown(dev)     # a stand-in Comm may keep none
        buf = grow(0, device=dev)
        heads, cleared, end = [], set(), 0
        clear = self.sparse
        for it in items:
            c = self.coders.get(it.name) or self.coder(it.name)
            if trace.ENABLED:
                trace.begin(it.name, it.tensor, c)
            room = buf[end:]
            if self.error_feedback and it.used:    # ledger += gradient, sent, crossed out
                ledger = self.ledgers.get(it.name) or self.ledger(it.name)
                packet = ledger.step(c, it.tensor, clear_grad=clear, into=room)
                if clear:
                    cleared.add(it.name)
            else:   # no ledger, or no gradient here: the ledger waits, a zero gradient is sent
                x = check_grad(it.tensor, "gradient", c.nonfinite)
                with torch.no_grad():
                    packet = c.encode(x.unsqueeze(0), into=room)[0][0]
            if trace.ENABLED:
                trace.end(packet)
            size = 0
            for part in packet.parts:
                size += part.numel()
            if buf.numel() < end + size:
                buf = grow(end + size, keep=end, device=dev)
            for part in packet.parts:
                n = part.numel()
                if part.data_ptr() != buf.data_ptr() + end or part.device != dev:
                    buf[end: end + n].copy_(part)     # else made in place (int8 codes, sign bits)
                end += n
            heads.append(packet.header())
        head = b"".join(heads)
        if buf.numel() < end + len(head):
            buf = grow(end + len(head), keep=end, device=dev)
        buf[end: end + len(head)].copy_(torch.frombuffer(bytearray(head), dtype=torch.uint8))
        return buf[: end + len(head)], len(head), cleared

    def decode(self, items, parts, heads, cleared=frozenset()) -> None:
        """Overwrite each item with the mean of the ranks' packets for it (parts[r]: rank r's
        byte string; heads[r]: its headers, on the host; the packets in the items' order)."""
        bodies = [p[: p.numel() - len(h)] for p, h in zip(parts, heads)]
        at = [0] * len(parts)            # where rank r's next header starts in heads[r]
        off = [0] * len(parts)           # where its next parts start in bodies[r]
        for it in items:
            packets = []
            for r, body in enumerate(bodies):
                packet, at[r], off[r] = read(heads[r], at[r], body, off[r])
                if packet.shape != tuple(it.tensor.shape):
                    raise ValueError(f"rank {r} sent a packet of shape {packet.shape} for {it.name}, "
                                     f"which has shape {tuple(it.tensor.shape)}")
                packets.append(packet)
            zeroed = it.name in cleared
            if trace.ENABLED:
                trace.then("onto the zeroed gradient" if zeroed else "written over the gradient")
            decode_mean(packets, it.tensor, zeroed)

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


class _Grown:
    """A send buffer for one call, where the communicator keeps none (see Comm.send_buffer)."""

    def __init__(self, device):
        self.buf = torch.empty(0, dtype=torch.uint8, device=device)

    def __call__(self, nbytes, keep=0, device=None):
        if self.buf.numel() < nbytes:
            new = torch.empty(max(nbytes, 2 * self.buf.numel()), dtype=torch.uint8, device=self.buf.device)
            new[:keep].copy_(self.buf[:keep])
            self.buf = new
        return self.buf


register("allgather", AllGather)
