"""Fitting a `Link` to measured collective times: `calibrate` (any collective the cost
model names) and `fit_allreduce_link` (two ring all-reduce timings). Also names of
`milktea.cost`, which loads this module on first use.
"""
from __future__ import annotations

import numpy as np

from .checks import check_int
from .cost import COLLECTIVES, Link, comm_time, ring_allreduce_time  # noqa: F401


def _timing_points(sizes_bytes, times_s) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, times) as float64 arrays, checked: one finite time > 0 per finite size >= 0,
    and at least two distinct sizes (one size cannot separate latency from bandwidth)."""
    m = np.asarray(sizes_bytes, dtype=np.float64).ravel()
    t = np.asarray(times_s, dtype=np.float64).ravel()
    if m.shape != t.shape:
        raise ValueError(f"need one time per size, got {m.size} sizes and {t.size} times")
    if not (np.isfinite(m).all() and np.isfinite(t).all()) or (m < 0).any() or (t <= 0).any():
        raise ValueError("sizes must be finite and >= 0, times finite and > 0")
    if np.unique(m).size < 2:
        raise ValueError(f"need at least 2 distinct message sizes to separate latency from bandwidth, "
                         f"got {np.unique(m).size}; time a small and a large message")
    return m, t


def calibrate(sizes_bytes, times_s, workers: int, collective: str = "allreduce") -> Link:
    """Fit alpha (latency) and B (bandwidth) to measured collective times by least squares.

    Each collective is  t = a alpha + b M / B  with (a, b) from its formula above, so the
    fit is linear in (alpha, 1/B); it minimises relative errors, so small messages (which
    reveal alpha) count as much as large ones (which reveal B). Needs two distinct sizes.

    >>> link = Link(1e9, 20e-6)
    >>> sizes = [1e3, 1e5, 1e7]
    >>> calibrate(sizes, [ring_allreduce_time(m, 4, link) for m in sizes], 4)
    Link(8.00 Gbit/s, 20 us)
    """
    N = check_int(workers, "workers", 1)
    m, t = _timing_points(sizes_bytes, times_s)
    if collective in ("allreduce", "compressed_allreduce"):     # the same alpha and beta counts
        if N == 1:
            raise ValueError("a 1-worker all-reduce sends nothing: calibrate with workers >= 2")
        a, b = 2 * (N - 1), 2 * (N - 1) / N
    elif collective in ("allgather", "alltoall"):
        if N == 1:
            raise ValueError(f"a 1-worker {collective} sends nothing: calibrate with workers >= 2")
        a, b = N - 1, N - 1
    elif collective == "ps":
        a, b = 2, 2 * N
    else:
        raise ValueError(f"collective must be one of {COLLECTIVES}, got {collective!r}")
    # relative errors: timing noise grows with the time, and small messages carry alpha
    A = np.stack([np.full_like(m, a), b * m], axis=1) / t[:, None]
    (alpha, beta), *_rest = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if beta <= 0:
        raise ValueError(f"the fit gives a non-positive time per byte ({beta:.3g} s/B): times do not grow "
                         f"with size; measure larger messages or more repetitions")
    if alpha < 0:
        raise ValueError(f"the fit gives a negative latency ({alpha * 1e6:.3g} us): measure smaller "
                         f"messages or more repetitions so the fixed cost is visible")
    return Link(1.0 / beta, alpha)


def fit_allreduce_link(sizes_bytes, times_s, workers: int) -> Link:
    """:func:`calibrate` for ring all-reduce times, robust to noise on fast links: if the
    least-squares fit is unphysical, alpha comes from the smallest message and B from the
    largest. Needs at least two distinct sizes (and valid times), like :func:`calibrate`.

    >>> fit_allreduce_link([1e3, 1e7], [ring_allreduce_time(m, 4, Link(1e9, 20e-6)) for m in (1e3, 1e7)], 4)
    Link(8.00 Gbit/s, 20 us)
    """
    N = check_int(workers, "workers", 1)
    m, t = _timing_points(sizes_bytes, times_s)   # checked here: the fallback below must not see bad points
    if N == 1:
        raise ValueError("a 1-worker all-reduce sends nothing: calibrate with workers >= 2")
    try:
        return calibrate(m, t, N, collective="allreduce")
    except ValueError:     # only the unphysical fits are left to fall back from
        small, large = int(np.argmin(m)), int(np.argmax(m))
        alpha = t[small] / (2 * (N - 1))
        beta = max(t[large] - 2 * (N - 1) * alpha, 1e-12) / (2 * (N - 1) / N * m[large])
        return Link(1.0 / beta, alpha)
