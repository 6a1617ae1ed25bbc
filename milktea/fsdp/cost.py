"""ZeRO stages 1-3 and FSDP, priced: bytes each rank sends per step, and memory each rank holds.

With P parameters on N ranks (the ZeRO paper's Psi and N_d), per step and rank:

    DDP (stage 0)   all-reduce of the gradient          2 (N-1)/N P g
    ZeRO-1, ZeRO-2  reduce-scatter of the gradient        (N-1)/N P g
                    + all-gather of the updated weights   (N-1)/N P w
    ZeRO-3 / FSDP   reduce-scatter of the gradient        (N-1)/N P g
                    + all-gather in the forward pass      (N-1)/N P w
                    + all-gather again in backward        (N-1)/N R w   (R: the weights freed after forward)

(g, w: bytes per gradient and weight entry on the wire: 4 for fp32, 2 for bf16, about 1.016
for int8 in blocks of 256 with a float32 scale each; `bytes_per_entry` measures a
compressor's.) A compressed reduce-scatter is an all-to-all of each rank's packets for the
others, (N-1)/N P g with g the packet's bytes per entry: the same formula.

    >>> b = step_bytes(25_000_000, 4)                         # FSDP, fp32, every layer re-gathered
    >>> {k: round(v / 1e6) for k, v in b.items()}             # MB per rank per step
    {'all_gather_forward': 75, 'all_gather_backward': 75, 'reduce_scatter': 75, 'total': 225}
    >>> round(step_bytes(25_000_000, 4, stage=0)["total"] / 1e6)    # DDP's all-reduce: 2/3 of it
    150

Memory per rank (K bytes of optimizer state per parameter: 8 for Adam's two moments in fp32):

    >>> m = memory_per_rank(25_000_000, 4, optimizer_bytes=8)
    >>> {k: round(v / 1e6) for k, v in m.items()}             # MB
    {'params': 25, 'grads': 25, 'optimizer': 50, 'ledger': 0, 'total': 100}
    >>> round(memory_per_rank(25_000_000, 4, optimizer_bytes=8, ledger="worker")["ledger"] / 1e6)
    75

A ledger before the reduce-scatter ("worker", error feedback of each rank's chunks for the
others) holds (N-1)/N of a float32 gradient: 3x the sharded gradient it sits beside at N=4,
the memory sharding saved. A ledger on the reduced shard ("shard", HSDP's replicate hop)
holds P/N. The transient full weights of the layer being computed are not counted.
"""
from __future__ import annotations

from ..checks import check_choice, check_int, check_number
from ..cost import (Link, allgather_bytes, alltoall_bytes, alltoall_time, ring_allreduce_bytes,
                    ring_allreduce_time)

STAGES = (0, 1, 2, 3)
LEDGERS = (None, "worker", "shard")


def reduce_scatter_bytes(nbytes, workers: int) -> float:
    """Bytes a rank sends in a ring reduce-scatter of an `nbytes` input: (N-1)/N M (each of
    N-1 steps forwards one partial sum of M/N bytes)."""
    M, N = check_number(nbytes, "nbytes", 0), check_int(workers, "workers", 1)
    return (N - 1) / N * M


def reduce_scatter_time(nbytes, workers: int, link: Link) -> float:
    """Ring reduce-scatter of an `nbytes` input: (N-1) alpha + (N-1)/N M / B, half a ring
    all-reduce."""
    N = check_int(workers, "workers", 1)
    return ring_allreduce_time(nbytes, N, link) / 2


def all_gather_bytes(shard_nbytes, workers: int) -> float:
    """Bytes a rank sends in a ring all-gather of `shard_nbytes` per rank: (N-1) shards."""
    return allgather_bytes(shard_nbytes, workers)


def all_to_all_bytes(chunk_nbytes, workers: int) -> float:
    """Bytes a rank sends in an all-to-all with `chunk_nbytes` for each other rank: (N-1) chunks."""
    return alltoall_bytes(chunk_nbytes, workers)


def all_to_all_time(chunk_nbytes, workers: int, link: Link) -> float:
    """All-to-all of `chunk_nbytes` per pair: N-1 messages out of each rank,
    (N-1) (alpha + C / B), the time of an all-gather of one chunk."""
    return alltoall_time(chunk_nbytes, workers, link)


def bytes_per_entry(compressor, numel: int = 65536, dtype=None) -> float:
    """Bytes on the wire per entry of a gradient chunk of `numel` entries sent through
    `compressor` (header and scales included), measured on a Gaussian chunk; None means
    FSDP2's own collective in `dtype` (default float32: 4.0).

    >>> from milktea import Quantize
    >>> round(bytes_per_entry(Quantize(bits=8, chunk=256)), 3)      # 1 byte + 4 per 256 + a header
    1.016
    """
    import torch
    dtype = torch.float32 if dtype is None else dtype
    if compressor is None:
        return float(torch.empty(0, dtype=dtype).element_size())
    n = check_int(numel, "numel", 1)
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(dtype)
    return compressor.fork(0, 0).compress(x).nbytes / n


def step_bytes(params, workers: int, *, stage: int = 3, grad_bytes: float = 4.0, weight_bytes: float = 4.0,
               regathered=None, replicas: int = 1, replica_bytes: float | None = None) -> dict:
    """Bytes one rank sends per training step, by collective, and their "total".

    params: parameter count P; workers: N, the ranks a parameter is sharded over.
    stage: 0 (DDP: one all-reduce), 1 or 2 (reduce-scatter + all-gather of the updated
      weights), 3 (ZeRO-3 / FSDP: reduce-scatter + all-gather in forward and in backward).
    grad_bytes, weight_bytes: bytes per entry on the wire (`bytes_per_entry`).
    regathered: parameters re-gathered in backward (default all of P; FSDP2 keeps its
      root module's weights from forward to backward, so a real model re-gathers fewer).
    replicas: HSDP's replicas R (each holding N shards): the reduced shard is then averaged
      over the replicas, an all-reduce of P/N entries ("all_reduce": 2 (R-1)/R P/N g), or,
      compressed at `replica_bytes` per entry, an all-gather of its packets ((R-1) P/N c).

    >>> b = step_bytes(1_000_000, 2, replicas=2, weight_bytes=2.0)
    >>> {k: round(v / 1e3) for k, v in b.items()}            # kB
    {'all_gather_forward': 1000, 'all_gather_backward': 1000, 'reduce_scatter': 2000, 'all_reduce': 2000, 'total': 6000}
    """
    P, N = check_number(params, "params", 0), check_int(workers, "workers", 1)
    check_choice(stage, STAGES, "stage")
    g, w = check_number(grad_bytes, "grad_bytes", 0), check_number(weight_bytes, "weight_bytes", 0)
    R = P if regathered is None else check_number(regathered, "regathered", 0, P)
    reps = check_int(replicas, "replicas", 1)
    out = {}
    if stage == 0:
        out["all_reduce"] = ring_allreduce_bytes(P * g, N)
    else:
        out["all_gather_forward"] = all_gather_bytes(P * w / N, N)
        if stage == 3:
            out["all_gather_backward"] = all_gather_bytes(R * w / N, N)
        out["reduce_scatter"] = reduce_scatter_bytes(P * g, N)
        if reps > 1:
            out["all_reduce"] = (ring_allreduce_bytes(P * g / N, reps) if replica_bytes is None
                                 else all_gather_bytes(P / N * check_number(replica_bytes, "replica_bytes", 0), reps))
    out["total"] = sum(out.values())
    return out


def memory_per_rank(params, workers: int, *, stage: int = 3, param_bytes: float = 4.0, grad_bytes: float = 4.0,
                    optimizer_bytes: float = 8.0, ledger: str | None = None, ledger_bytes: float = 4.0) -> dict:
    """Bytes one rank holds between steps: "params", "grads", "optimizer", "ledger", "total".

    stage 0 (DDP) keeps everything whole; 1 shards the optimizer state; 2 the gradients
    too; 3 (FSDP) the weights as well. ledger: None, "worker" (error feedback before the
    reduce-scatter: this rank's chunks for the N-1 others, (N-1)/N P entries) or "shard"
    (on the reduced shard, P/N entries), `ledger_bytes` each (float32: 4).

    >>> m = memory_per_rank(1_000_000, 8, stage=1, optimizer_bytes=12)   # fp32 master + Adam
    >>> {k: round(v / 1e6, 2) for k, v in m.items()}
    {'params': 4.0, 'grads': 4.0, 'optimizer': 1.5, 'ledger': 0.0, 'total': 9.5}
    """
    P, N = check_number(params, "params", 0), check_int(workers, "workers", 1)
    check_choice(stage, STAGES, "stage")
    check_choice(ledger, LEDGERS, "ledger")
    pb, gb = check_number(param_bytes, "param_bytes", 0), check_number(grad_bytes, "grad_bytes", 0)
    ob, lb = check_number(optimizer_bytes, "optimizer_bytes", 0), check_number(ledger_bytes, "ledger_bytes", 0)
    out = {"params": P * pb / (N if stage == 3 else 1),
           "grads": P * gb / (N if stage >= 2 else 1),
           "optimizer": P * ob / (N if stage >= 1 else 1),
           "ledger": {None: 0.0, "worker": (N - 1) / N * P * lb, "shard": P / N * lb}[ledger]}
    out["total"] = sum(out.values())
    return out
