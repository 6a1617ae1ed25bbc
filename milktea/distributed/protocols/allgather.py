"""Packets that differ per rank: all-gathered as bytes, each rank decodes the mean."""
from __future__ import annotations

import copy
import time

import torch

from milktea import arena, cost, trace
from milktea.packet import Packet

from .base import Protocol, log, register

#: Bytes left before the room lent for a packet's parts: its header goes there (a few dozen)
HEAD_ROOM = 256


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
        with trace.bucket("allgather", step, self.rank):
            t0 = time.perf_counter()
            payload, cleared = self.encode(items, comm)
            log(comm, step, compress_s=time.perf_counter() - t0, payload_bytes=payload.numel())
            parts = comm.all_gather_bytes(payload, step)
            t0 = time.perf_counter()
            self.decode(items, parts, cleared)
            log(comm, step, decode_s=time.perf_counter() - t0)

    def encode(self, items, comm=None) -> tuple[torch.Tensor, set]:
        """This rank's packets for the items, end to end as one byte string; and the names
        of the items whose gradient was zeroed on its way into the ledger.

        With a `comm` that keeps one, the string is written into the send buffer it keeps (`Comm.send_buffer`),
        and a compressor's large byte parts are carved from that buffer's free room
        (`milktea.arena`), then moved into place: a step allocates no copy of a packet."""
        dev = items[0].tensor.device
        send_buffer = getattr(comm, "send_buffer", None)      # a Comm's; a stand-in may have none
        buf = send_buffer(0, device=dev) if send_buffer is not None else None
        wire, cleared, end = [], set(), 0
        for it in items:
            c = self.coder(it.name)
            if trace.ENABLED:
                trace.begin(it.name, it.tensor, c)
            room = buf[end + HEAD_ROOM:] if buf is not None and buf.numel() > end + HEAD_ROOM else None
            with arena.parts_into(room):
                if self.error_feedback and it.used:   # ledger += gradient, sent, crossed out
                    # "clears_gradient": the gradient is zeroed as it enters the ledger, and the
                    # mean of the packets lands on those zeros (one pass over the bucket less)
                    clear = "clears_gradient" in c.fast_paths
                    packet = self.ledger(it.name).step(c, it.tensor, clear_grad=clear)
                    if clear:
                        cleared.add(it.name)
                else:   # no ledger, or no gradient here: the ledger waits, a zero gradient is sent
                    packet = c.compress(it.tensor)
            if trace.ENABLED:
                trace.end(packet)
            if buf is None:
                wire.append(packet.to_tensor())
                continue
            buf = send_buffer(end + packet.nbytes, keep=end, device=dev)
            packet.write_into(buf[end: end + packet.nbytes])
            end += packet.nbytes
        return (buf[:end] if buf is not None else torch.cat(wire)), cleared

    def decode(self, items, parts, cleared=frozenset()) -> None:
        """Overwrite each item with the mean of the ranks' packets for it (parts[r]: rank
        r's byte string, its packets in the items' order)."""
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
            zeroed = it.name in cleared
            if trace.ENABLED:
                trace.then("mean onto the zeroed gradient" if zeroed else "mean written over the gradient")
            self.coders[it.name].decompress_mean(packets, out=it.tensor, zeroed=zeroed)

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
