"""The `auto` policy: compress a bucket only where the cost model says it pays.

At a bucket's first compressed step every rank times its protocol on the real gradients
(`Protocol.probe`: compress, decode N packets, on a copy of the compressor), prices both
ways of sending it with the calibrated link model, and the ranks agree on the slowest
rank's figures (one tiny all-reduce), so all of them take the same decision. A bucket is
compressed when

    dense all-reduce time  >  (1 + margin) * (codec time + compressed collectives' time)

On a fast link (loopback) the codec costs more than it saves and everything stays dense.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from milktea import cost

MARGIN = 0.2


def probe(state, plan, buf) -> tuple[float, float]:
    """(codec seconds, compressed communication seconds) for this bucket on this rank
    (the faster of two tries, so a cold cache does not decide)."""
    tensors = [it.tensor.clone() for it in plan.items(buf, used=())]
    if not tensors:
        return 0.0, 0.0
    return min(state.protocol.probe(tensors, state.model_link) for _ in range(2))


def decide_bucket(state, plan, buf, step) -> str:
    codec_s, comm_s = probe(state, plan, buf)
    agreed = torch.tensor([codec_s, comm_s], dtype=torch.float64, device=buf.device)
    state.comm.all_reduce(agreed, step, op=dist.ReduceOp.MAX)
    codec_s, comm_s = agreed.tolist()
    comp_bytes = sum(s.numel for s in plan.segments if s.compress) * buf.element_size()
    dense_s = cost.ring_allreduce_time(comp_bytes, state.world, state.model_link)
    decision = "compress" if dense_s > (1 + MARGIN) * (codec_s + comm_s) else "dense"
    state.decisions[plan.names] = dict(bucket=len(state.decisions), params=len(plan.segments), decision=decision, dense_s=dense_s,
                                       codec_s=codec_s, compressed_comm_s=comm_s, bytes=comp_bytes)
    return decision
