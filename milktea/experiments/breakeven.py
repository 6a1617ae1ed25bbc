"""Where compression stops paying: a scheme's step time against dense as the link gets
faster (codec time stays, link time shrinks), the bandwidths where the two cross (in either
direction), the same in words, and which collective wins as the number of workers grows.

    >>> s = Scheme("top1%", ratio=100.0, collective="allgather", overhead_s=0.01)
    >>> [c.direction for c in breakeven_gbits(s, params=25_000_000, compute_s=0.1, workers=8)]
    ['down']
    >>> where_it_pays([1, 10, 100], [0.8, 0.9, 1.5])
    'starts paying above 16 Gbit/s'
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import cost
from ..crossings import Crossing, Segment, crossings, segments
from ..i18n import N_, _
from . import verdicts


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


def breakeven_gbits(scheme: Scheme, params: int, compute_s: float, workers: int,
                    latency: float = 50e-6, lo: float = 1e-3, hi: float = 1e5, points: int = 97) -> list[Crossing]:
    """Every bandwidth (Gbit/s) between `lo` and `hi` where `scheme` and dense take the same
    time, with its direction: "down" where the scheme stops paying as the link gets faster,
    "up" where it starts paying (an all-gather's fewer latency steps can win back a fast
    link, for instance). Found on a log grid of `points` bandwidths, then each refined by
    bisection. An empty list: the scheme pays, or loses, on every link tried.

    >>> few = Scheme("int8", ratio=4.0, collective="allgather")      # 64 workers: R > N/2 fails
    >>> [c.direction for c in breakeven_gbits(few, 25_000_000, 0.1, 64)]
    ['up']
    """
    def speedup(b):
        link = cost.Link.gbit(b, latency)
        return Scheme("dense", 1.0).step_time(params, compute_s, workers, link) / \
            scheme.step_time(params, compute_s, workers, link)
    grid = [lo * (hi / lo) ** (i / (points - 1)) for i in range(points)]
    found = []
    for c in crossings(grid, [speedup(b) for b in grid]):
        i = max(k for k, b in enumerate(grid) if b <= c.at)
        a, b = grid[i], grid[min(i + 1, points - 1)]
        rising = c.direction == "up"
        for _step in range(60):
            mid = math.sqrt(a * b)
            # keep the crossing between a and b: a stays on the side the curve comes from
            if (speedup(mid) < 1) == rising:
                a = mid
            else:
                b = mid
        found.append(Crossing(math.sqrt(a * b), c.direction))
    return found


# how a stretch of a speedup curve reads, by its kind (milktea.crossings.segments)
_KINDS = {"above": N_("pays"), "below": N_("costs time"), "level": N_("within the noise (±{band})")}


def where_it_pays(gbits, speedups, band: float = 0.0) -> verdicts.Said:
    """Where on the links tried a speedup curve pays (above 1 by more than `band`, the run's
    relative noise), costs time (below by more than `band`) or is level with the baseline,
    in words: "pays on every link tried", "stops paying above 3.7 Gbit/s", "starts paying
    above 12 Gbit/s", or stretch by stretch. kind: "always", "never", "level", "stops",
    "starts" or "mixed".

    >>> where_it_pays([1, 10, 100], [2.0, 1.5, 0.5])
    'stops paying above 23 Gbit/s'
    >>> where_it_pays([1, 10, 100], [1.01, 1.02, 0.99], band=0.05).kind
    'level'
    """
    segs = _merged(gbits, segments(gbits, speedups, 1.0, band))
    noise = f"{band:.0%}"
    kinds = [s.kind for s in segs]
    if len(segs) == 1:
        text = {"above": _("pays on every link tried"), "below": _("never pays on the links tried"),
                "level": _("no measurable difference on any link tried (within ±{band})").format(band=noise)}
        return verdicts.Said(text[kinds[0]], {"above": "always", "below": "never", "level": "level"}[kinds[0]])
    if kinds == ["above", "below"]:
        return verdicts.Said(_("stops paying above {b} Gbit/s").format(b=_gbit(segs[0].hi)), "stops")
    if kinds == ["below", "above"]:
        return verdicts.Said(_("starts paying above {b} Gbit/s").format(b=_gbit(segs[0].hi)), "starts")
    parts = []
    for s in segs:
        what = _(_KINDS[s.kind]).format(band=noise)
        if s.lo is None:
            parts.append(_("{what} up to {b} Gbit/s").format(what=what, b=_gbit(s.hi)))
        elif s.hi is None:
            parts.append(_("{what} above {a} Gbit/s").format(what=what, a=_gbit(s.lo)))
        else:
            parts.append(_("{what} from {a} to {b} Gbit/s").format(what=what, a=_gbit(s.lo), b=_gbit(s.hi)))
    return verdicts.Said(_("; ").join(parts), "mixed")


def _merged(gbits, segs: list) -> list:
    """`segs` without the level stretches that only pass between a paying and a losing one
    (two grid points or fewer inside): the curve crossing 1, not a range of links where
    the two are level; the neighbours then meet where it crosses."""
    out = list(segs)
    for i in range(len(out) - 2, 0, -1):
        s, before, after = out[i], out[i - 1], out[i + 1]
        inside = sum(s.lo < b < s.hi for b in gbits)
        if s.kind == "level" and before.kind != after.kind and inside <= 2:
            mid = math.sqrt(s.lo * s.hi)
            out[i - 1:i + 2] = [Segment(before.kind, before.lo, mid), Segment(after.kind, mid, after.hi)]
    return out


def _gbit(b: float) -> str:
    return f"{b:.2g}" if b < 100 else f"{b:.0f}"


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
