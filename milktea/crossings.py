"""Where a curve crosses a level, in both directions: the break-even of a speedup curve.

A speedup against a baseline, drawn over link bandwidths, can fall through 1 (compression
stops paying as the link gets faster), rise through 1 (the baseline's fixed costs, say a
latency term or a codec, start to dominate), or do both. `segments` cuts the curve into
stretches above, level with and below the level, where "level" is a band of relative
half-width `band` (the run's noise: a curve inside it is not measurably different from the
baseline); the boundaries are interpolated on a log-log scale, as the curves are drawn.
`crossings` gives the points where the curve passes the level itself, each with its
direction. Both look at every point of the grid: neither assumes the curve is monotone.

    >>> [(round(c.at, 2), c.direction) for c in crossings([1, 10, 100], [0.5, 2.0, 0.5])]
    [(3.16, 'up'), (31.62, 'down')]
    >>> [(s.kind, s.lo, s.hi) for s in segments([1, 10, 100], [2.0, 2.0, 2.0])]
    [('above', None, None)]
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Crossing:
    """A point where the curve passes a level: `at` (interpolated x) and `direction`, "up"
    when the curve rises through the level as x grows, "down" when it falls through it."""
    at: float
    direction: str


@dataclass(frozen=True)
class Segment:
    """A stretch of the grid where the curve stays `kind` ("above", "level" or "below") the
    level: from `lo` to `hi` (interpolated x; None where the stretch reaches the grid's end)."""
    kind: str
    lo: float | None
    hi: float | None


def _check(xs, ys) -> tuple[list[float], list[float]]:
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]
    if len(xs) != len(ys) or not xs:
        raise ValueError(f"need as many values as grid points (and at least one), got {len(xs)} and {len(ys)}")
    if any(not (x > 0 and math.isfinite(x)) for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError("the grid must be positive, finite and increasing (it is interpolated on a log scale)")
    if any(not (y > 0 and math.isfinite(y)) for y in ys):
        raise ValueError(f"the values must be positive and finite (a speedup or a ratio), got {ys}")
    return xs, ys


def _cut(x0: float, y0: float, x1: float, y1: float, level: float) -> float:
    """x where the straight line through (log x0, log y0) and (log x1, log y1) meets log level."""
    f = (math.log(level) - math.log(y0)) / (math.log(y1) - math.log(y0))
    return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))


def crossings(xs, ys, level: float = 1.0) -> list[Crossing]:
    """Every point where the curve ys(xs) passes `level`, in order, with its direction. A
    curve that only touches the level and turns back does not cross it.

    >>> crossings([1, 10, 100], [2.0, 1.5, 0.5])[0].direction
    'down'
    >>> crossings([1, 10, 100], [0.8, 0.9, 1.2])[0].direction
    'up'
    >>> crossings([1, 10], [2.0, 3.0])
    []
    """
    xs, ys = _check(xs, ys)
    out, side, last = [], None, None      # the side of the level the curve was last on, and where
    for i, (x, y) in enumerate(zip(xs, ys)):
        here = "above" if y > level else "below" if y < level else None
        if here is None:
            continue
        if side is not None and here != side:
            j = last
            # the last point on the old side and the first on the new one bracket the crossing
            at = _cut(xs[j], ys[j], x, y, level) if ys[j] != y else math.sqrt(xs[j] * x)
            out.append(Crossing(at, "up" if here == "above" else "down"))
        side, last = here, i
    return out


def segments(xs, ys, level: float = 1.0, band: float = 0.0) -> list[Segment]:
    """The curve cut into stretches above level·(1 + band), below level·(1 - band), and
    level in between, in order along the grid (see the module's docstring).

    >>> [(s.kind, s.lo and round(s.lo, 1), s.hi and round(s.hi, 1))
    ...  for s in segments([1, 10, 100], [2.0, 1.0, 0.5], band=0.1)]
    [('above', None, 7.3), ('level', 7.3, 14.2), ('below', 14.2, None)]
    """
    xs, ys = _check(xs, ys)
    if not (0 <= band < 1):
        raise ValueError(f"band must be a relative half-width in [0, 1), got {band!r}")
    bounds = (level * (1 - band), level * (1 + band))    # below | level | above

    def rank(y):                                          # 0 below, 1 level, 2 above
        return 0 if y < bounds[0] else 2 if y > bounds[1] else 1

    kinds = ("below", "level", "above")
    out, start, r0 = [], None, rank(ys[0])
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        r1 = rank(y1)
        step = 1 if r1 > r0 else -1
        for r in range(r0, r1, step):                     # each boundary between the two kinds, in order
            cut = _cut(x0, y0, x1, y1, bounds[r if step > 0 else r - 1])
            out.append(Segment(kinds[r], start, cut))
            start = cut
        r0 = r1
    out.append(Segment(kinds[r0], start, None))
    # with band 0 the level stretch between two kinds has no width: leave it out
    return [s for s in out if s.lo is None or s.hi is None or s.hi > s.lo]
