"""Top-K with error feedback as a DDP communication hook, in plain torch: read this first.

This is what ``milktea.ddp.compress(model, TopK(ratio), error_feedback=True)`` computes,
with none of its fast paths. For each parameter of a bucket: add the gradient to the
parameter's float32 ledger; send the k entries of largest magnitude (ties: the lower
position), in the gradient's dtype, and cross them out of the ledger; gather every rank's
positions and values; write their mean into the bucket. Parameters under `min_size` are
averaged as they are. milktea's hook gives the same bits through its fused and compiled
paths (how `TopK.encode` and `Ledger.step` are written): the tests hold it to this file.

    state = TopKReference(ratio=0.01)
    ddp_model.register_comm_hook(state, topk_hook)
"""
from __future__ import annotations

import torch
import torch.distributed as dist


class TopKReference:
    """The hook's state: the share of entries sent, and one ledger per parameter."""

    def __init__(self, ratio: float, min_size: int = 1024, group=None):
        self.ratio, self.min_size, self.group = ratio, min_size, group
        self.ledgers: dict[int, torch.Tensor] = {}      # id(parameter) -> what it has not sent


def topk_step(ledger: torch.Tensor, grad: torch.Tensor, ratio: float):
    """ledger += grad; the k entries of the ledger (rounded to grad's dtype) with the largest
    magnitude are sent and crossed out. Returns (their sorted positions, their values)."""
    ledger += grad
    x = ledger.to(grad.dtype)                            # what the wire can carry
    k = max(1, min(x.numel(), int(round(ratio * x.numel()))))
    order = x.abs().float().sort(descending=True, stable=True).indices   # equal: lower position first
    idx = order[:k].sort().values
    vals = x[idx]
    ledger[idx] -= vals.to(ledger.dtype)                 # zero in float32; bf16's rounding stays
    return idx, vals


def mean_of(sent, out: torch.Tensor) -> torch.Tensor:
    """out = the mean over the ranks of what they sent ((positions, values) each), in rank order."""
    out.zero_()
    for idx, vals in sent:
        out.index_add_(0, idx, vals)
    return out.div_(len(sent))


def topk_hook(state: TopKReference, bucket):
    buf, world = bucket.buffer(), dist.get_world_size(state.group)
    dense, offset = [], 0
    for p in bucket.parameters():
        g = buf[offset: offset + p.numel()]
        offset += p.numel()
        if p.numel() < state.min_size:
            dense.append(g)
            continue
        ledger_dtype = torch.float64 if g.dtype == torch.float64 else torch.float32
        ledger = state.ledgers.setdefault(id(p), torch.zeros(g.shape, dtype=ledger_dtype, device=g.device))
        idx, vals = topk_step(ledger, g, state.ratio)
        every_idx = [torch.empty_like(idx) for _ in range(world)]
        every_vals = [torch.empty_like(vals) for _ in range(world)]
        dist.all_gather(every_idx, idx, group=state.group)
        dist.all_gather(every_vals, vals, group=state.group)
        mean_of(list(zip(every_idx, every_vals)), g)
    if dense:                                            # divided first, then summed, as milktea's
        flat = torch.cat(dense).div_(world)
        dist.all_reduce(flat, group=state.group)
        for g, part in zip(dense, flat.split([g.numel() for g in dense])):
            g.copy_(part)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut
