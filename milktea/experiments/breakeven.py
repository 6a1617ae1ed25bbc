"""Where compression stops paying: a scheme's step time against dense as the link gets
faster (codec time stays, link time shrinks), the bandwidth where the two cross, and which
collective wins as the number of workers grows.

    >>> s = Scheme("top1%", ratio=100.0, collective="allgather", overhead_s=0.01)
    >>> 0 < breakeven_gbit(s, params=25_000_000, compute_s=0.1, workers=8) < 1e5
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import cost


@dataclass
class Scheme:
    """One way of exchanging a gradient: its wire bytes relative to fp32, its collective and
    its codec time per step (seconds, both ends)."""
    name: str
    ratio: float
    collective: str = "allreduce"
    overhead_s: float = 0.0

    def step_time(self, params: int, compute_s: float, workers: int, link: cost.Link) -> float:
        nbytes = cost.gradient_bytes(params) / self.ratio
        return compute_s + self.overhead_s + cost.comm_time(nbytes, workers, link, self.collective)


def speedup_vs_bandwidth(schemes: list[Scheme], params: int, compute_s: float, workers: int,
                         gbits, latency: float = 50e-6) -> dict:
    """Dense step time / scheme step time at each bandwidth (Gbit/s): above 1 compression pays."""
    dense = Scheme("dense", 1.0)
    out = {"gbit": list(gbits)}
    for s in schemes:
        out[s.name] = [dense.step_time(params, compute_s, workers, cost.Link.gbit(b, latency)) /
                       s.step_time(params, compute_s, workers, cost.Link.gbit(b, latency)) for b in gbits]
    return out


def breakeven_gbit(scheme: Scheme, params: int, compute_s: float, workers: int,
                   latency: float = 50e-6, lo: float = 1e-3, hi: float = 1e5) -> float:
    """The bandwidth (Gbit/s) above which `scheme` is slower than dense (bisection on a log
    scale); inf if it pays on every link up to `hi`, 0 if on none down to `lo`."""
    def gain(b):
        link = cost.Link.gbit(b, latency)
        return Scheme("dense", 1.0).step_time(params, compute_s, workers, link) - \
            scheme.step_time(params, compute_s, workers, link)
    if gain(hi) > 0:
        return math.inf
    if gain(lo) <= 0:
        return 0.0
    for _step in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if gain(mid) > 0 else (lo, mid)
    return math.sqrt(lo * hi)


def protocols_by_workers(params: float, ratio: float, link=None, workers=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)):
    """Bytes and seconds per worker per step, by the cost model, of the three ways to
    exchange a gradient of `params` fp32 numbers as `workers` grows: a dense ring
    all-reduce; all-gather of packets `ratio` times smaller (each worker receives N - 1);
    and the compressed all-reduce (about 2(N-1)/N of a packet, whatever N). Returns
    (rows, crossings): `crossings["allgather_over_dense"]`, the first N where gathering
    packets moves more bytes than the dense ring (R > N/2 fails), and
    `crossings["compressed_allreduce_faster"]`, the first N where the cost model picks the
    compressed all-reduce over all-gather (None: not within `workers`).

    >>> rows, cross = protocols_by_workers(124e6, 80.0, workers=(2, 64, 256))
    >>> [r["best"] for r in rows], cross["allgather_over_dense"]
    (['allgather', 'compressed_allreduce', 'compressed_allreduce'], 256)
    """
    link = cost.Link.gbit(10) if link is None else link
    if not ratio > 1:
        raise ValueError(f"ratio must be > 1 (a compressed packet is smaller than the gradient), got {ratio!r}")
    dense = cost.gradient_bytes(params)
    packet = dense / ratio
    rows, cross = [], {"allgather_over_dense": None, "compressed_allreduce_faster": None}
    for n in workers:
        c = cost.protocol_costs(packet, n, link, dense_bytes=dense)
        best = min(c, key=lambda k: c[k]["seconds"])
        rows.append({"workers": n, "dense MB": c["dense"]["bytes"] / 1e6, "allgather MB": c["allgather"]["bytes"] / 1e6,
                     "compressed allreduce MB": c["compressed_allreduce"]["bytes"] / 1e6,
                     "dense s": c["dense"]["seconds"], "allgather s": c["allgather"]["seconds"],
                     "compressed allreduce s": c["compressed_allreduce"]["seconds"], "best": best})
        if cross["allgather_over_dense"] is None and c["allgather"]["bytes"] > c["dense"]["bytes"]:
            cross["allgather_over_dense"] = n
        if cross["compressed_allreduce_faster"] is None and cost.choose_protocol(packet, n, link) == "compressed_allreduce":
            cross["compressed_allreduce_faster"] = n
    return rows, cross
