"""Bytes and step time per worker as the number of workers grows, measured and modelled.

    python -m milktea.bench scaling [--workers 2 4 8] [--steps 3] [--gbit 0.05] [--hidden 256]

Runs 2, 4 and 8 real processes (gloo) on an emulated link (milktea.distributed.link:
each collective takes at least what the link would take), each with a small MLP's
gradient, and exchanges it per scheme: dense ring all-reduce, all-gather of Top-1%+EF
packets, the compressed all-reduce (milktea.distributed.compressed_allreduce) with
Top-1%, Sign and int8, and PowerSGD (rank 2, its two all-reduces). Per scheme it reports
the bytes each worker put on the wire per step (as logged by the collectives, size
tables and padding included) and the median exchange time, beside the cost model's
prediction from the packets' sizes; then the model extends the table to 64 and 1,024
workers. The model counts the data messages only (each exchange here also sends a
size table first). `run()` returns the rows; nothing here draws.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from .. import cost
from .timing import table

SCHEMES = ("dense ring", "all-gather top1%", "car top1%", "car sign", "car int8", "powersgd r2")


def _model(hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def _gradients(model, rank: int, step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _exchange(scheme, state, grads, comm, step):
    """One step of `scheme`; returns the bytes of this worker's packet (the payload)."""
    import torch.distributed as dist  # noqa: F401  (initialised by launch)
    from ..compressors import PowerSGD, Quantize, Sign, TopK
    from ..distributed.compressed_allreduce import CompressedAllReduce, allreduce
    from ..feedback import ErrorFeedback
    from ..packet import Packet
    flat = torch.cat([g.reshape(-1) for g in grads])
    if scheme == "dense ring":
        comm.all_reduce(flat.div_(comm.world), step)
        return flat.numel() * 4
    if scheme == "all-gather top1%":
        sender = state.setdefault("sender", ErrorFeedback(TopK(0.01).fork(comm.rank)))
        packet = sender.compress(flat)
        parts = comm.all_gather_bytes(packet.to_tensor(), step)
        TopK(0.01).aggregate([Packet.from_tensor(p) for p in parts]).div_(comm.world)
        return packet.nbytes
    if scheme.startswith("car "):
        codec = {"car top1%": TopK(0.01), "car sign": Sign(), "car int8": Quantize(8)}[scheme]
        car = state.setdefault("car", CompressedAllReduce(codec, comm.rank, comm.world))
        allreduce(car, flat, comm, step)
        return sum(p.nbytes for p in car.last[0])
    if scheme == "powersgd r2":
        mats = [g for g in grads if g.dim() == 2]
        small = torch.cat([g.reshape(-1) for g in grads if g.dim() != 2])
        comm.all_reduce(small, step)
        pss = state.setdefault("ps", [PowerSGD(2) for _ in mats])
        ps_ = [ps.project(m) for ps, m in zip(pss, mats)]
        P = torch.cat([p.reshape(-1) for p in ps_])
        comm.all_reduce(P, step)
        off, qs = 0, []
        for ps, m, p in zip(pss, mats, ps_):
            p = P[off: off + p.numel()].view_as(p)
            off += p.numel()
            qs.append(ps.finish(m, p))
        Q = torch.cat([q.reshape(-1) for q in qs])
        comm.all_reduce(Q, step)
        return (small.numel() + P.numel() + Q.numel()) * 4
    raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


def worker(schemes, steps: int, hidden: int, link) -> dict:
    """Inside each launched process: per scheme, wire bytes per step, payload bytes and the
    median exchange time (this rank's; the slowest rank is taken by the caller)."""
    import torch.distributed as dist
    from ..distributed.comm import Comm
    from ..distributed.link import EmulatedLink
    from ..distributed.stats import StatsLog
    model = _model(hidden)
    out = {}
    for scheme in schemes:
        log = StatsLog()
        comm = Comm(None, EmulatedLink(link), log)
        state, times, payload = {}, [], 0
        for step in range(steps + 1):                # step 0 warms up (not counted)
            grads = _gradients(model, comm.rank, step)
            dist.barrier()
            t0 = time.perf_counter()
            payload = _exchange(scheme, state, grads, comm, step)
            times.append(time.perf_counter() - t0)
            log.close_step()
        wire = [s.wire_bytes for s in log.history[1:]]
        out[scheme] = dict(wire=sum(wire) / len(wire), payload=payload, time=statistics.median(times[1:]))
    return out


def predict(scheme: str, payload: float, dense: float, workers: int, link) -> tuple[float, float]:
    """(bytes per worker, seconds) the cost model gives for one exchange."""
    if scheme == "dense ring":
        return cost.ring_allreduce_bytes(payload, workers), cost.ring_allreduce_time(payload, workers, link)
    if scheme == "powersgd r2":       # three all-reduces: the small tensors, P, then Q
        extra = 2 * cost.ring_allreduce_time(0, workers, link)
        return cost.ring_allreduce_bytes(payload, workers), cost.ring_allreduce_time(payload, workers, link) + extra
    if scheme.startswith("all-gather"):
        return cost.allgather_bytes(payload, workers), cost.allgather_time(payload, workers, link)
    return cost.compressed_allreduce_bytes(payload, workers), cost.compressed_allreduce_time(payload, workers, link)


def run(workers=(2, 4, 8), steps: int = 3, hidden: int = 256, gbit: float = 0.05, latency: float = 50e-6,
        schemes=SCHEMES, timeout: float = 600) -> dict:
    from ..distributed import launch
    link = cost.Link.gbit(gbit, latency)
    dense = sum(p.numel() for p in _model(hidden).parameters()) * 4
    rows = []
    for n in workers:
        res = launch(worker, n, args=(tuple(schemes), steps, hidden, link), results="all", timeout=timeout)
        for scheme in schemes:
            per = [r[scheme] for r in res]
            payload = max(p["payload"] for p in per)
            pb, pt = predict(scheme, payload, dense, n, link)
            rows.append(dict(scheme=scheme, workers=n, wire_bytes=statistics.mean(p["wire"] for p in per),
                             payload=payload, model_bytes=pb, step_s=max(p["time"] for p in per), model_s=pt,
                             measured=True))
    last = {r["scheme"]: r for r in rows if r["workers"] == max(workers)}
    for n in (64, 1024):
        for scheme in schemes:
            pb, pt = predict(scheme, last[scheme]["payload"], dense, n, link)
            rows.append(dict(scheme=scheme, workers=n, wire_bytes=None, payload=last[scheme]["payload"],
                             model_bytes=pb, step_s=None, model_s=pt, measured=False))
    for r in rows:
        r["vs_dense_ring"] = r["model_bytes"] / cost.ring_allreduce_bytes(dense, r["workers"])
    return dict(link=link, dense_bytes=dense, params=dense // 4, rows=rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench scaling", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--gbit", type=float, default=0.05)
    args = ap.parse_args(argv)
    res = run(tuple(args.workers), args.steps, args.hidden, args.gbit)
    print(f"emulated link {res['link']}; an MLP of {res['params']} parameters ({res['dense_bytes']} bytes dense); "
          f"{args.steps} steps per scheme\n")

    def fmt(v, f):
        return "-" if v is None else f.format(v)
    print(table([dict(scheme=r["scheme"], N=r["workers"], wire_kB=fmt(r["wire_bytes"] and r["wire_bytes"] / 1e3, "{:.1f}"),
                      model_kB=f"{r['model_bytes'] / 1e3:.1f}", vs_dense_ring=f"{r['vs_dense_ring']:.3f}",
                      step_ms=fmt(r["step_s"] and r["step_s"] * 1e3, "{:.1f}"), model_ms=f"{r['model_s'] * 1e3:.2f}")
                 for r in sorted(res["rows"], key=lambda r: (SCHEMES.index(r["scheme"]), r["workers"]))],
                ["scheme", "N", "wire_kB", "model_kB", "vs_dense_ring", "step_ms", "model_ms"]))
    print("\nwire_kB: measured bytes each worker sent per step (size tables and padding included); model_kB and "
          "model_ms: the cost model from the packets' sizes; N = 64 and 1024 are the model alone.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
