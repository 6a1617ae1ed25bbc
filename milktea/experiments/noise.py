"""How much a measurement can be trusted: the relative noise of repeated timings, and the
95% interval of a difference over paired runs (the same seeds). `verdicts` uses these to say
"no measurable difference" instead of a winner when the numbers are within the noise.

    >>> round(noise_of([100, 102, 98, 101, 99]), 3)
    0.01
"""
from __future__ import annotations

import math
from typing import Iterable


def _missing(x) -> bool:
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


# two-sided 95% quantiles of Student's t, by degrees of freedom (1..10); 2.0 beyond
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def noise_of(samples: Iterable[float], floor: float = 0.0) -> float:
    """The relative noise of repeated timings: half their interquartile range over their
    median (at least `floor`). Fewer than 2 finite samples give `floor`.

    >>> round(noise_of([100, 102, 98, 101, 99]), 3)
    0.01
    """
    xs = sorted(float(x) for x in samples if not _missing(x))
    if len(xs) < 2:
        return floor
    def q(p):
        i = p * (len(xs) - 1)
        lo = math.floor(i)
        return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)
    mid = q(0.5)
    if mid <= 0:
        return floor
    return max(floor, (q(0.75) - q(0.25)) / 2 / mid)


def paired(a: Iterable[float], b: Iterable[float]) -> tuple[float, float]:
    """Mean of the differences a_i - b_i over paired runs (the same seed for both) and the
    half-width of its 95% confidence interval (Student's t): a difference whose size is
    below the half-width is not significant. One pair gives an infinite half-width.

    >>> m, h = paired([0.95, 0.94, 0.96], [0.90, 0.91, 0.92])
    >>> round(m, 3), round(h, 3)
    (0.04, 0.025)
    """
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    if not d or any(_missing(x) for x in d):
        return float("nan"), float("nan")
    n = len(d)
    mean = sum(d) / n
    if n == 1:
        return mean, math.inf
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    t = _T95[n - 2] if n - 1 <= len(_T95) else 2.0
    return mean, t * sd / math.sqrt(n)
