"""How each compressor family crosses the wire inside the DDP hook (one bucket at a time).

- "dense": the bucket divided by N, all-reduced.
- "allreduce" (Identity, Cast: packets with a fixed support that sum on the wire):
  divide by N, cast (fp16/bf16), all-reduce the cast tensor, cast back.
- "gather" (sparsifiers, quantizers, Sign, Chain): one packet per rank, all-gathered as
  bytes (sizes first, then the padded bytes: indices and values travel together); each
  packet is decoded once and summed with `compressor.aggregate`, then divided by N.
  Nothing is re-quantized on the way, so the error does not grow with N, and the result
  is exactly what the single-process simulator computes for the same packets.
- "powersgd": per matrix P = M Q, all-reduce P, orthonormalise, Q = M^T P, all-reduce Q,
  average P Q^T (Vogels et al. 2019); the averaged Q is the next step's warm start.
Parameters kept dense (small or by name) travel in one extra all-reduce per bucket.
"""
from __future__ import annotations

import copy
import time

import torch

from milktea.compressors import Cast, Compressor, PowerSGD, Sparsifier, sparse_decode
from milktea.compressors.base import from_bytes
from milktea.feedback import ErrorFeedback
from milktea.packet import Packet


def family_of(compressor) -> str:
    if compressor is None:
        return "dense"
    if isinstance(compressor, PowerSGD):
        return "powersgd"
    if getattr(compressor, "summable", False):
        return "allreduce"
    return "gather"


def make_sender(compressor, error_feedback: bool, rank: int, index: int):
    """Bucket `index`'s own copy of the compressor on `rank` (with its ledger). Stochastic
    rounding gets a seed of its own per rank and bucket: if every rank drew the same random
    numbers their rounding errors would add up instead of averaging out."""
    c = compressor.fork(rank, index)
    return ErrorFeedback(c) if error_feedback else c


def init_plan(state, plan) -> None:
    """Give a new bucket its own compressor (and ledger) instances."""
    if plan.family == "powersgd":
        for s in plan.segments:
            if s.compress:
                rows, cols = s.shape[0], s.numel // s.shape[0]
                r = min(state.compressor.rank, rows, cols)
                if r * (rows + cols) >= s.numel:   # the factors would not be smaller
                    s.compress = False
        plan.powersgd = [copy.deepcopy(state.compressor) for s in plan.segments if s.compress]
        plan.residuals = [None] * len(plan.powersgd)
    else:
        plan.sender = make_sender(state.compressor, state.error_feedback, state.comm.rank, plan.index)


def save_plan(state, plan) -> dict:
    out = {"decision": plan.decision}
    if plan.family == "powersgd":
        out["powersgd"] = [ps.state_dict() for ps in plan.powersgd]
        out["residuals"] = [None if r is None else r.clone() for r in plan.residuals]
    elif hasattr(plan.sender, "state_dict"):
        out["sender"] = plan.sender.state_dict()
    return out


def load_plan(state, plan, saved: dict) -> None:
    plan.decision = saved.get("decision")
    if plan.family == "powersgd":
        for ps, s in zip(plan.powersgd, saved.get("powersgd", [])):
            ps.load_state_dict(s)
        res = saved.get("residuals", [])
        plan.residuals = [None if r is None else r.clone() for r in res] or plan.residuals
    elif "sender" in saved and hasattr(plan.sender, "load_state_dict"):
        plan.sender.load_state_dict(saved["sender"])


def _split(plan, buf):
    comp = [buf.narrow(0, s.offset, s.numel) for s in plan.segments if s.compress]
    dense = [buf.narrow(0, s.offset, s.numel) for s in plan.segments if not s.compress]
    return comp, dense


def _gather_views(views):
    return views[0] if len(views) == 1 else torch.cat(views)


def _scatter(views, flat) -> None:
    if len(views) == 1 and views[0].data_ptr() == flat.data_ptr():
        return
    off = 0
    for v in views:
        v.copy_(flat[off: off + v.numel()])
        off += v.numel()


def _dense_part(state, views, step) -> None:
    if not views:
        return
    flat = _gather_views(views)
    flat.div_(state.world)
    state.comm.all_reduce(flat, step)
    _scatter(views, flat)
    state.stats.add(step, payload_bytes=flat.numel() * flat.element_size())


def run_dense(state, buf, step) -> None:
    buf.div_(state.world)
    state.comm.all_reduce(buf, step)
    state.stats.add(step, payload_bytes=buf.numel() * buf.element_size())


def _compressed_region(plan, buf):
    """The compressed slices as one flat tensor: a view of the bucket when they are
    contiguous (the usual case), else a copy (written back by _scatter)."""
    segs = [s for s in plan.segments if s.compress]
    start, end = segs[0].offset, segs[-1].offset + segs[-1].numel
    if end - start == sum(s.numel for s in segs):
        return buf.narrow(0, start, end - start), None
    views = [buf.narrow(0, s.offset, s.numel) for s in segs]
    return torch.cat(views), views


def aggregate_into(compressor, packets, out: torch.Tensor, workers: int) -> torch.Tensor:
    """out = compressor.aggregate(packets) / workers, in place and bit for bit the same, with
    fewer passes over memory: sparse packets are added into `out` and only the touched
    entries divided; other packets are decoded straight into `out`."""
    agg = type(compressor).aggregate
    if agg is Sparsifier.aggregate:            # TopK, RandomK, Chain
        out.zero_()
        touched = []
        for p in packets:
            idx, vals = sparse_decode(p)
            out.index_add_(0, idx, vals.to(out.dtype))
            touched.append(idx)
        idx = torch.cat(touched)
        out[idx] = out[idx] / workers
    elif agg is Compressor.aggregate:
        compressor.decompress(packets[0], out=out)
        for p in packets[1:]:
            out += compressor.decompress(p)
        out.div_(workers)
    else:                                      # a compressor with its own aggregate
        out.copy_(compressor.aggregate(packets).reshape(-1).to(out.dtype))
        out.div_(workers)
    return out


def run_gather(state, plan, buf, step) -> None:
    _dense_part(state, [buf.narrow(0, s.offset, s.numel) for s in plan.segments if not s.compress], step)
    t0 = time.perf_counter()
    x, views = _compressed_region(plan, buf)
    packet = plan.sender.compress(x)
    payload = packet.to_tensor()
    state.stats.add(step, compress_s=time.perf_counter() - t0, payload_bytes=payload.numel())
    parts = state.comm.all_gather_bytes(payload, step)
    t0 = time.perf_counter()
    aggregate_into(state.compressor, [Packet.from_tensor(p) for p in parts], x, state.world)
    if views is not None:
        _scatter(views, x)
    state.stats.add(step, decode_s=time.perf_counter() - t0)


def run_allreduce(state, plan, buf, step) -> None:
    comp, dense = _split(plan, buf)
    _dense_part(state, dense, step)
    t0 = time.perf_counter()
    x = _gather_views(comp).div(state.world)
    wire_dtype = state.compressor.dtype if isinstance(state.compressor, Cast) else x.dtype
    if state.error_feedback:
        packet = plan.sender.compress(x)
        low = from_bytes(packet.parts[0], wire_dtype).clone()
    else:
        low = x.to(wire_dtype)
    state.stats.add(step, compress_s=time.perf_counter() - t0, payload_bytes=low.numel() * low.element_size())
    state.comm.all_reduce(low, step)
    t0 = time.perf_counter()
    _scatter(comp, low.to(buf.dtype))
    state.stats.add(step, decode_s=time.perf_counter() - t0)


def run_powersgd(state, plan, buf, step) -> None:
    _dense_part(state, [buf.narrow(0, s.offset, s.numel) for s in plan.segments if not s.compress], step)
    comp = [s for s in plan.segments if s.compress]
    if not comp:
        return
    t0 = time.perf_counter()
    views = [buf.narrow(0, s.offset, s.numel).view(s.shape[0], -1) for s in comp]
    mats = [v.float() for v in views]          # the bucket itself when it is float32
    if state.error_feedback:
        for j, m in enumerate(mats):
            if plan.residuals[j] is not None:
                m.add_(plan.residuals[j])       # m may alias the bucket: it is overwritten below
    ps_ = [ps.project(m) for ps, m in zip(plan.powersgd, mats)]
    P = torch.cat([p.reshape(-1) for p in ps_])
    state.stats.add(step, compress_s=time.perf_counter() - t0, payload_bytes=P.numel() * 4)
    state.comm.all_reduce(P, step)
    t0 = time.perf_counter()
    qs, off = [], 0
    for j, (ps, m, p) in enumerate(zip(plan.powersgd, mats, ps_)):
        p = ps_[j] = P[off: off + p.numel()].view_as(p)
        off += p.numel()
        q = ps.finish(m, p)
        if state.error_feedback:   # the ledger keeps what this rank's own P Q^T missed: m - P q^T
            if plan.residuals[j] is None:
                plan.residuals[j] = torch.empty_like(m)
            torch.addmm(m, p, q.t(), alpha=-1, out=plan.residuals[j])
        qs.append(q)
    Q = torch.cat([q.reshape(-1) for q in qs])
    state.stats.add(step, compress_s=time.perf_counter() - t0, payload_bytes=Q.numel() * 4)
    state.comm.all_reduce(Q, step)
    t0 = time.perf_counter()
    Q.div_(state.world)
    off = 0
    for ps, p, q, view in zip(plan.powersgd, ps_, qs, views):
        q = Q[off: off + q.numel()].view_as(q)
        off += q.numel()
        if ps.warm_start:
            ps.q = q.clone()   # every rank starts the next step from the same averaged Q
        if view.dtype == torch.float32:
            torch.mm(p, q.t(), out=view)   # P Q^T straight into the bucket
        else:
            view.copy_(ps.expand(p, q))
    state.stats.add(step, decode_s=time.perf_counter() - t0)


RUN = {"gather": run_gather, "allreduce": run_allreduce, "powersgd": run_powersgd}


def decide(state, plan, buf, step) -> str:
    """"compress" or "dense" for this bucket (always "compress" unless policy="auto")."""
    if state.policy != "auto":
        return "compress"
    if plan.decision is None:
        from milktea.distributed.policy import decide_bucket
        plan.decision = decide_bucket(state, plan, buf, step)
    return plan.decision
