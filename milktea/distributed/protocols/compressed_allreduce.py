"""The compressed all-reduce as the hook's protocol "compressed_allreduce" (the arithmetic
is milktea.distributed.compressed_allreduce; this moves its packets between processes)."""
from __future__ import annotations

import copy
import time


from milktea import cost, trace
from milktea.compressors.packet import lay_out, read_laid
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
        laid = [lay_out([s[j] for s in sent]) for j in range(N)]    # packets for rank j: parts, then headers
        log(comm, step, compress_s=time.perf_counter() - t0, payload_bytes=sum(p.nbytes for s in sent for p in s))
        got, heads = comm.all_to_all_tailed([d for d, _ in laid], [t for _, t in laid], step)
        t0 = time.perf_counter()
        mine = [read_laid(g, h, len(items)) for g, h in zip(got, heads)]      # mine[i][k]: rank i, item k
        reduced = [self.car(it.name).reduce([m[k] for m in mine]) for k, it in enumerate(items)]
        payload, tail = lay_out(reduced)
        log(comm, step, compress_s=time.perf_counter() - t0)
        parts, heads = comm.all_gather_tailed(payload, tail, step)
        t0 = time.perf_counter()
        every = [read_laid(p, h, len(items)) for p, h in zip(parts, heads)]
        for k, it in enumerate(items):
            self.car(it.name).decode([e[k] for e in every], out=it.tensor.view(-1))
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


register(PROTOCOL, CompressedAllReduceProtocol)
