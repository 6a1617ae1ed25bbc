"""Compressed all-reduce: bytes per worker that do not grow with the number of workers.

All-gathering compressed packets costs each worker (N-1) packets, so the traffic grows
with N while a dense ring all-reduce stays near 2x the model. This protocol (the one
1-bit Adam uses, Tang et al. 2021) keeps the ring's shape with compressed chunks:

1. each worker adds its gradient to its own ledger, splits it into N chunks and
   compresses chunk j for worker j (crossing out what it sends: worker-side ledger);
2. all-to-all: worker j receives chunk j from everyone, decodes and averages them,
   adds its server-side ledger, compresses that again (server-side ledger);
3. all-gather of the N server packets: every worker decodes them into the average.

Each worker sends N-1 chunk packets and N-1 copies of its server packet, each about
n / (N R) bytes: 2 (N-1)/N x n/R in all, flat in N. Both ledgers keep what was not
sent, so nothing is lost:

    N x (sum of delivered averages + server residual) + sum of worker residuals
        == sum of every gradient fed in

`CompressedAllReduce` is one worker's state and arithmetic, with no communication: the
simulator runs N of them side by side, `allreduce` runs one per process over
torch.distributed. Both make the same calls, so their results agree bit for bit.

    >>> from milktea import Sign
    >>> ranks = [CompressedAllReduce(Sign(), r, 2) for r in range(2)]
    >>> out = simulate_round(ranks, [torch.tensor([1., 2., -3., 4.]), torch.tensor([3., 2., 1., -4.])])
    >>> out
    tensor([ 2.0000,  2.0000, -0.5000,  0.5000])
"""
from __future__ import annotations

import copy

import torch

from milktea.compressors import Compressor
from milktea.distributed.checkpoint import coder_state, load_coder_state
from milktea.feedback import ErrorFeedback
from milktea.compressors.packet import Packet, lay_out, read_laid

PROTOCOL = "compressed_allreduce"


def chunk_bounds(numel: int, workers: int) -> list[tuple[int, int]]:
    """N contiguous chunks of a flat tensor, sizes differing by at most one (the first
    numel % N chunks are one longer). Every chunk is non-empty: needs numel >= workers.

    >>> chunk_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if numel < workers:
        raise ValueError(f"a compressed all-reduce over {workers} workers needs at least {workers} entries "
                         f"(one per chunk), got {numel}; keep such small tensors dense")
    base, extra = divmod(numel, workers)
    out, start = [], 0
    for j in range(workers):
        end = start + base + (j < extra)
        out.append((start, end))
        start = end
    return out


class CompressedAllReduce:
    """One worker's side of the protocol for one flat tensor stream.

    `compressor`: any milktea compressor (it is forked: one copy per chunk, seeded per
    rank and stream, and one for the chunk this worker reduces). `error_feedback`: keep a
    ledger on both sides. Calls, in order, per step:
    `encode(x)` -> N packets (packet j goes to worker j);
    `reduce(packets)` (the N packets of this worker's chunk, in rank order) -> one packet;
    `decode(packets)` (the N reduced packets, in rank order) -> the average.
    """

    def __init__(self, compressor, rank: int, workers: int, *, error_feedback: bool = True, stream: int = 0):
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a milktea Compressor (e.g. Sign()), got {type(compressor).__name__}")
        for name, v, low in (("rank", rank, 0), ("workers", workers, 1), ("stream", stream, 0)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v < low:
                raise ValueError(f"{name} must be >= {low}, got {v}")
        if rank >= workers:
            raise ValueError(f"rank must be < workers ({workers}), got {rank}")
        self.compressor, self.rank, self.workers = compressor, rank, workers
        self.error_feedback = bool(error_feedback)
        base = stream * (workers + 1)

        def make(s):
            c = compressor.fork(rank, base + s)
            return ErrorFeedback(c) if self.error_feedback else c
        self.senders = [make(j) for j in range(workers)]    # worker side: chunk j -> worker j
        self.server = make(workers)                        # server side: this worker's chunk
        self.numel: int | None = None
        self.bounds: list[tuple[int, int]] = []
        self.last = None          # (chunk packets, reduced packet) of the latest round

    def _bounds_for(self, numel: int):
        if self.numel is None:
            self.numel, self.bounds = numel, chunk_bounds(numel, self.workers)
        elif numel != self.numel:
            raise ValueError(f"this all-reduce carries {self.numel} entries, got {numel}")
        return self.bounds

    def encode(self, x: torch.Tensor) -> list[Packet]:
        """Worker side: chunk j of x (plus its ledger) compressed for worker j."""
        flat = x.reshape(-1)
        return [s.compress(flat[a:b]) for s, (a, b) in zip(self.senders, self._bounds_for(flat.numel()))]

    def reduce(self, packets) -> Packet:
        """Server side: the average of everyone's packet for this worker's chunk, plus the
        server ledger, compressed again."""
        if len(packets) != self.workers:
            raise ValueError(f"reduce needs one packet per worker ({self.workers}), got {len(packets)}")
        if self.numel is None:
            raise RuntimeError("reduce comes after encode: this worker has not seen the tensor's size yet")
        a, b = self.bounds[self.rank]
        for p in packets:
            if p.numel != b - a:
                raise ValueError(f"worker {self.rank}'s chunk has {b - a} entries, a packet carries {p.numel}")
        mean = self.compressor.aggregate(list(packets)).reshape(-1) / self.workers
        return self.server.compress(mean)

    def decode(self, packets, out: torch.Tensor | None = None) -> torch.Tensor:
        """Every worker: the N reduced chunks, decoded side by side into the average."""
        if len(packets) != self.workers:
            raise ValueError(f"decode needs one packet per worker ({self.workers}), got {len(packets)}")
        if out is None:
            out = torch.empty(self.numel, dtype=packets[0].dtype, device=packets[0].device)
        for p, (a, b) in zip(packets, self.bounds):
            if p.numel != b - a:
                raise ValueError(f"chunk ({a}, {b}) has {b - a} entries, its packet carries {p.numel}")
            self.compressor.decompress(p, out=out[a:b].view(p.shape))
        return out

    # --- the ledgers -------------------------------------------------------------------------
    def worker_residual(self) -> torch.Tensor | None:
        """What this worker has not sent yet (all chunks, flat), or None before any step."""
        if not self.error_feedback or self.senders[0].residual is None:
            return None
        return torch.cat([s.residual.reshape(-1) for s in self.senders])

    def server_residual(self) -> torch.Tensor | None:
        """What this worker, reducing its chunk, has not passed on yet."""
        return self.server.residual if self.error_feedback else None

    def state_dict(self) -> dict:
        """Both ledgers and every copy's state, random generators included, so that a
        restored worker rounds exactly as the one that saved it would have."""
        return {"numel": self.numel, "senders": [coder_state(s) for s in self.senders],
                "server": coder_state(self.server)}

    def load_state_dict(self, state: dict) -> None:
        if len(state["senders"]) != self.workers:
            raise ValueError(f"saved state is for {len(state['senders'])} workers, this one has {self.workers}")
        if state["numel"] is not None:
            self._bounds_for(int(state["numel"]))
        for s, saved in zip(self.senders + [self.server], state["senders"] + [state["server"]]):
            load_coder_state(s, saved)

    def __repr__(self) -> str:
        return (f"CompressedAllReduce({self.compressor!r}, rank {self.rank} of {self.workers}, "
                f"error_feedback={self.error_feedback})")


def simulate_round(ranks, xs):
    """One step of the protocol for all workers in one process (`ranks[i]` holds worker
    i's state, `xs[i]` its tensor); returns the average every worker receives. The
    packets each worker made are in `ranks[i].last` afterwards: (its N chunk packets,
    its reduced packet); `wire_bytes(*ranks[i].last, i)` counts them."""
    W = len(ranks)
    sent = [r.encode(x) for r, x in zip(ranks, xs)]                # sent[i][j]: i -> j
    reduced = [ranks[j].reduce([sent[i][j] for i in range(W)]) for j in range(W)]
    out = ranks[0].decode(reduced)
    for r in ranks:
        r.last = (sent[r.rank], reduced[r.rank])
    return out.view_as(xs[0])


def wire_bytes(sent: list[Packet], reduced: Packet, rank: int) -> int:
    """Bytes one worker puts on the wire in one round: its chunk packets for the others,
    and its reduced packet to each of the others."""
    W = len(sent)
    return sum(p.nbytes for j, p in enumerate(sent) if j != rank) + (W - 1) * reduced.nbytes


# --- over torch.distributed --------------------------------------------------------------------
def allreduce(state: CompressedAllReduce, x: torch.Tensor, comm, step: int = 0,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """One worker's compressed all-reduce of `x` over `comm` (a milktea.distributed.comm.Comm):
    returns the average of all ranks' tensors as the protocol delivers it (the same on
    every rank). `state` is this rank's `CompressedAllReduce` (kept between steps)."""
    if state.workers != comm.world or state.rank != comm.rank:
        raise ValueError(f"state is for rank {state.rank} of {state.workers}, this process is rank "
                         f"{comm.rank} of {comm.world}")
    sent = state.encode(x)
    laid = [lay_out([p]) for p in sent]            # each packet's parts, then its header
    mine, heads = comm.all_to_all_tailed([d for d, _ in laid], [t for _, t in laid], step)
    reduced = state.reduce([read_laid(m, h, 1)[0] for m, h in zip(mine, heads)])
    payload, tail = lay_out([reduced])
    parts, heads = comm.all_gather_tailed(payload, tail, step)
    got = [read_laid(p, h, 1)[0] for p, h in zip(parts, heads)]
    state.last = (sent, reduced)
    return state.decode(got, out=out).view_as(x)


# --- as a DDP hook protocol (milktea.distributed.protocols.compressed_allreduce) -------------------
def use_compressed_allreduce(compressor):
    """A copy of `compressor` that the DDP hook (and the simulator) sends through the
    compressed all-reduce instead of its own protocol:

        milktea.ddp.compress(model, use_compressed_allreduce(Sign()), error_feedback=True)
    """
    if not isinstance(compressor, Compressor):
        raise TypeError(f"compressor must be a milktea Compressor (e.g. Sign()), got {type(compressor).__name__}")
    twin = copy.deepcopy(compressor)
    twin.protocol = PROTOCOL
    return twin
