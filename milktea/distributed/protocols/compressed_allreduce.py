"""The compressed all-reduce as the hook's protocol "compressed_allreduce" (the arithmetic
is milktea.distributed.compressed_allreduce; this moves its packets between processes)."""
from __future__ import annotations

import copy
import time

import torch

from milktea import cost, trace
from milktea.compressors.packet import Packet
from milktea.distributed.compressed_allreduce import PROTOCOL, CompressedAllReduce

from .base import Protocol, log, register, stream_of


class CompressedAllReduceProtocol(Protocol):
    """The hook's strategy "compressed_allreduce": per parameter one `CompressedAllReduce`
    (keyed by name, its random streams by name too); per bucket every parameter's chunk
    packets for rank j travel in one all-to-all payload, and the reduced packets in one
    all-gather. With error_feedback the ledgers are the protocol's own (both sides)."""
    collective = "compressed_allreduce"

    def __init__(self, compressor, error_feedback: bool = False, rank: int = 0, world: int = 1):
        super().__init__(compressor, error_feedback, rank, world)
        self.cars: dict[str, CompressedAllReduce] = {}

    def accepts(self, shape) -> bool:
        n = 1
        for d in shape:
            n *= d
        return n >= self.world            # one entry per chunk at least

    def car(self, name: str) -> CompressedAllReduce:
        if name not in self.cars:
            self.cars[name] = CompressedAllReduce(self.compressor, self.rank, self.world,
                                                  error_feedback=self.error_feedback,
                                                  stream=stream_of(name))
        return self.cars[name]

    def run(self, comm, items, step):
        N = self.world
        t0 = time.perf_counter()
        sent = [self.car(it.name).encode(it.tensor) for it in items]
        payloads = [torch.cat([s[j].to_tensor() for s in sent]) for j in range(N)]
        log(comm, step, compress_s=time.perf_counter() - t0, payload_bytes=sum(p.nbytes for s in sent for p in s))
        got = comm.all_to_all_bytes(payloads, step)
        t0 = time.perf_counter()
        offsets = [0] * N
        reduced = [self.car(it.name).reduce(_next_packets(got, offsets)) for it in items]
        payload = torch.cat([q.to_tensor() for q in reduced])
        log(comm, step, compress_s=time.perf_counter() - t0)
        parts = comm.all_gather_bytes(payload, step)
        t0 = time.perf_counter()
        offsets = [0] * N
        for it in items:
            self.car(it.name).decode(_next_packets(parts, offsets), out=it.tensor.view(-1))
        log(comm, step, decode_s=time.perf_counter() - t0)
        if trace.ENABLED:
            trace.hop(PROTOCOL)
            for it, s, q in zip(items, sent, reduced):
                trace.begin(it.name, it.tensor, self.compressor)
                trace.note(step=f"{N} chunk packets, then chunk {self.rank} reduced")
                trace.end(nbytes=sum(p.nbytes for p in s) + q.nbytes)

    def probe(self, tensors, link):
        c = copy.deepcopy(self.compressor)
        t0 = time.perf_counter()
        packets = [c.compress(t) for t in tensors]
        for p in packets:
            c.decompress(p)
        seconds = 2 * (time.perf_counter() - t0)          # compressed twice, decoded twice
        nbytes = sum(p.nbytes for p in packets)
        N = self.world
        return seconds, cost.compressed_allreduce_time(nbytes, N, link) + 2 * cost.allgather_time(8 * N, N, link)

    def state_dict(self) -> dict:
        return {"cars": {name: car.state_dict() for name, car in self.cars.items()}}

    def load_state_dict(self, state: dict, device=None) -> None:
        self.cars.clear()
        for name, saved in state["cars"].items():
            self.car(name).load_state_dict(saved)


def _next_packets(parts, offsets) -> list[Packet]:
    """The next packet in each rank's byte string (parts[r] from offsets[r]), advancing the offsets."""
    out = []
    for r, part in enumerate(parts):
        p = Packet.from_tensor(part[offsets[r]:])
        offsets[r] += p.nbytes
        out.append(p)
    return out


register(PROTOCOL, CompressedAllReduceProtocol)
