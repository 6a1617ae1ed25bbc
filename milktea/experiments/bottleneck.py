"""Chapter 01's numbers: how long the nightly phone call takes, on paper and for real.

    >>> b = breakdown(params=175e9, workers=64, gbit=100, compute=0.2)
    >>> round(b.comm_ring, 1), f"{b.waiting:.1%}"
    (110.3, '99.8%')
    >>> run = ring_allreduce([np.ones(8), 2 * np.ones(8)])
    >>> run.result[0].tolist() == [3.0] * 8, run.bytes_sent.tolist()    # 2(N-1)/N * 64 bytes
    (True, [64, 64])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import cost
from ..i18n import N_, _, count
from ..checks import check_int, check_number

# Parameter counts of well-known models (public figures, rounded).
MODELS = {"ResNet-50": 25.6e6, "BERT-large": 340e6, "GPT-2 XL": 1.5e9, "GPT-3": 175e9}


@dataclass(frozen=True)
class Breakdown:
    """One training step split into compute and communication, for one model and cluster."""
    params: float
    workers: int
    link: cost.Link
    compute: float           # seconds of forward + backward
    grad_bytes: int          # one full gradient
    comm_ring: float         # seconds for a ring all-reduce of it
    comm_ps: float           # seconds through one parameter server

    @property
    def step_ring(self) -> float:
        return cost.iteration_time(self.compute, self.comm_ring)

    @property
    def waiting(self) -> float:
        """Share of a ring step spent waiting for the network."""
        return cost.waiting_fraction(self.compute, self.comm_ring) if self.step_ring > 0 else 0.0

    def __repr__(self) -> str:
        return "Breakdown(" + _("{params} parameters, {workers} workers, {link}: compute {compute}, ring "
                                "{ring}, server {server}, waiting {waiting:.1%}").format(
            params=count(self.params), workers=self.workers, link=self.link, compute=seconds(self.compute),
            ring=seconds(self.comm_ring), server=seconds(self.comm_ps), waiting=self.waiting) + ")"


def breakdown(params: float, workers: int, gbit: float, compute: float, bytes_per_param: int = 4,
              latency: float = 50e-6) -> Breakdown:
    """Compute vs communication for `params` parameters on `workers` workers joined by
    `gbit` Gbit/s links, with `compute` seconds of forward + backward per step."""
    link = cost.Link.gbit(gbit, latency)
    m = cost.gradient_bytes(params, bytes_per_param)
    return Breakdown(float(params), workers, link, float(compute), m,
                     cost.ring_allreduce_time(m, workers, link),
                     cost.parameter_server_time(m, workers, link))


# gradient_table's columns (tables.heading shows "all-reduce at 25 Gbit/s (s)" through the template)
GRADIENT_COLUMNS = (N_("model"), N_("params"), N_("fp32 gradient (GB)"), N_("ring bytes per worker (GB)"),
                    N_("all-reduce at {} Gbit/s (s)"))


def gradient_table(models: dict[str, float] | None = None, workers: int = 64,
                   gbits: tuple[float, ...] = (25, 100)) -> list[dict]:
    """For each model: fp32 gradient bytes, bytes each worker sends in a ring all-reduce,
    and the seconds that takes on each link speed in `gbits`."""
    rows = []
    for name, params in (models or MODELS).items():
        m = cost.gradient_bytes(params)
        row = {"model": name, "params": params, "fp32 gradient (GB)": m / 1e9,
               "ring bytes per worker (GB)": cost.ring_allreduce_bytes(m, workers) / 1e9}
        for g in gbits:
            row[f"all-reduce at {g:g} Gbit/s (s)"] = cost.ring_allreduce_time(m, workers, cost.Link.gbit(g))
        rows.append(row)
    return rows


def scaling(nbytes: float, workers: list[int] | np.ndarray, link: cost.Link, servers: int = 1) -> dict:
    """Ring all-reduce vs parameter server as the number of workers grows: seconds per
    exchange and bytes through the busiest link (a ring worker's vs the server's)."""
    ns = [check_int(int(n), "workers", 1) for n in workers]
    return {"workers": np.array(ns),
            "ring_time": np.array([cost.ring_allreduce_time(nbytes, n, link) for n in ns]),
            "ps_time": np.array([cost.parameter_server_time(nbytes, n, link, servers) for n in ns]),
            "ring_bytes": np.array([cost.ring_allreduce_bytes(nbytes, n) for n in ns]),
            "ps_bytes": np.array([2.0 * n * nbytes / servers for n in ns])}


@dataclass
class RingRun:
    """A ring all-reduce executed step by step: every worker's result and bytes sent."""
    result: list[np.ndarray]
    bytes_sent: np.ndarray      # per worker
    steps: int
    log: list[list[tuple[int, int, int]]]   # per step: (sender, receiver, chunk) messages


def ring_allreduce(arrays: list[np.ndarray]) -> RingRun:
    """Sum equal-shaped arrays the way a ring all-reduce does, counting every byte.

    The vector is cut into N chunks. Reduce-scatter: in step s (N-1 steps) worker i sends
    its running sum of chunk (i - s) mod N to worker i+1, which adds its own. After that
    worker i holds the full sum of chunk (i + 1) mod N. All-gather: N-1 more steps pass
    the finished chunks around the ring. Each worker sends 2(N-1) chunks of M/N bytes."""
    if not isinstance(arrays, (list, tuple)) or not arrays:
        raise ValueError("give a non-empty list of arrays, one per worker")
    arrays = [np.asarray(a) for a in arrays]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"every worker must hold the same shape, got {[a.shape for a in arrays]}")
    n = len(arrays)
    shape = arrays[0].shape
    bounds = np.linspace(0, arrays[0].size, n + 1).round().astype(int)
    chunks = [[a.reshape(-1)[bounds[c]:bounds[c + 1]].astype(np.float64) for c in range(n)]
              for a in arrays]
    sent = np.zeros(n, dtype=np.int64)
    log = []
    itemsize = arrays[0].dtype.itemsize
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            msgs = []
            for i in range(n):
                c = (i - s) % n if phase == "reduce-scatter" else (i + 1 - s) % n
                msgs.append((i, (i + 1) % n, c, chunks[i][c].copy()))
            for i, j, c, data in msgs:     # all sends of a step happen at once
                chunks[j][c] = chunks[j][c] + data if phase == "reduce-scatter" else data
                sent[i] += data.size * itemsize
            log.append([(i, j, c) for i, j, c, _size in msgs])
    result = [np.concatenate(w).reshape(shape).astype(arrays[0].dtype) for w in chunks]
    return RingRun(result, sent, len(log), log)


# -- a real all-reduce between local worker processes ------------------------------------

DEFAULT_SIZES = (4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)


@dataclass
class AllReduceMeasurement:
    """Median seconds of real all-reduces (one per message size) and the link they imply."""
    sizes: list[int]
    times: list[float]
    workers: int
    backend: str
    link: cost.Link           # alpha and bandwidth fitted to the times
    correct: bool             # the all-reduce returned the exact sum

    def predicted(self, sizes=None) -> np.ndarray:
        """The cost model's times with the fitted link."""
        sizes = self.sizes if sizes is None else sizes
        return np.array([cost.ring_allreduce_time(m, self.workers, self.link) for m in sizes])

    def errors(self) -> np.ndarray:
        """The fit's relative error at each size: predicted / measured - 1."""
        return self.predicted() / np.asarray(self.times) - 1

    def achieved(self, i: int = -1) -> float:
        """Bytes per second one worker sent in the all-reduce of message i (default: the
        largest): 2(N-1)/N of the message over its time, what a bandwidth measures."""
        return cost.ring_allreduce_bytes(self.sizes[i], self.workers) / self.times[i]

    def __repr__(self) -> str:
        return "AllReduceMeasurement(" + _("{workers} workers, {backend}, {n} sizes {low}..{high} B, fitted "
                                           "{link}, sum correct: {correct}").format(
            workers=self.workers, backend=self.backend, n=len(self.sizes), low=self.sizes[0], high=self.sizes[-1],
            link=self.link, correct=_("yes") if self.correct else _("no")) + ")"


def _measure_worker(sizes, repeats):
    """Runs on every rank (inside milktea.distributed.launch): time the all-reduces, check a sum."""
    import torch.distributed as dist

    from ..device import rank_device
    from ..distributed.calibrate import measure_allreduce
    backend = dist.get_backend()
    device = rank_device(backend)
    sizes, times = measure_allreduce(sizes, repeats, device=device)
    n = dist.get_world_size()
    check = torch.full((1000,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(check)
    correct = bool((check == n * (n + 1) / 2).all())
    return {"sizes": sizes, "times": times, "backend": backend, "correct": correct}


fit_link = cost.fit_allreduce_link   # alpha and B from measured ring all-reduce times


def measure_local_allreduce(sizes=DEFAULT_SIZES, workers: int = 2, repeats: int = 5,
                            timeout: float = 240.0) -> AllReduceMeasurement:
    """Start `workers` local processes (gloo on CPU, NCCL with a GPU each), time a dense
    float32 all-reduce of each size (bytes; median of `repeats`, the slowest rank's), and
    fit the cost model's alpha and bandwidth to the times."""
    try:
        from ..distributed import launch
    except ImportError as e:     # the multi-process runtime is a separate part of the package
        raise ImportError(f"measure_local_allreduce needs milktea.distributed (the multi-process runtime): {e}") from e
    check_int(workers, "workers", 2), check_int(repeats, "repeats", 1)
    sizes = [int(s) for s in sizes]
    if len(set(sizes)) < 2 or min(sizes) < 4:
        raise ValueError(f"need at least 2 distinct sizes of >= 4 bytes, got {sizes}")
    out = launch(_measure_worker, nprocs=workers, args=(sizes, repeats), timeout=timeout)
    link = fit_link(out["sizes"], out["times"], workers)
    return AllReduceMeasurement(out["sizes"], out["times"], workers, out["backend"], link, out["correct"])


def fit_sentence(m: AllReduceMeasurement, tolerance: float = 0.15) -> str:
    """How well the two-parameter model follows the measured times, said from its errors:
    close (every size within ±`tolerance`) or rough (with the range of its errors)."""
    errs = m.errors()
    worst = int(np.argmax(np.abs(errs)))
    size = _("{kib:,.0f} KiB").format(kib=m.sizes[worst] / 1024)
    if np.abs(errs).max() <= tolerance:
        return _("The two-parameter fit is close here: at every size the model is within ±{tol:.0%} of the measured "
                 "time (worst {e:+.0%}, at {size}).").format(tol=tolerance, e=errs[worst], size=size)
    return _("The two-parameter fit is rough here: across these sizes the model is off by between **{lo:+.0%}** and "
             "**{hi:+.0%}** (worst at {size}). A straight line in $M$ cannot follow loopback's changing regimes "
             "(small messages fit in caches and use a different protocol than large ones), nor the noise of a "
             "shared CPU.").format(lo=errs.min(), hi=errs.max(), size=size)


def link_sentence(m: AllReduceMeasurement) -> str:
    """The fitted link beside what the largest message really achieved, with the fit's error
    there: the number to quote for large transfers is the achieved one."""
    fit, big = m.link, m.achieved()
    text = _("Fitted over all sizes, the two processes exchange at about **{fit:.3g} Gbit/s** with **{lat:.0f} µs** of "
             "fixed cost per message (backend: {backend}; sum correct: {ok}). The largest message, {mib:.3g} MiB, "
             "moved at **{big:.3g} Gbit/s** (the bytes each worker sent over its time), where the fit is off by "
             "{err:+.0%}: for large transfers, quote that one.").format(
        fit=fit.bandwidth * 8 / 1e9, lat=fit.latency * 1e6, backend=m.backend, ok=_("yes") if m.correct else _("no"),
        mib=m.sizes[-1] / 2 ** 20, big=big * 8 / 1e9, err=m.errors()[-1])
    return text + " " + _("Small messages are dominated by $\\alpha$, large ones by $M/B$: that is why the curve bends.")


# -- the story's phone night (chapter 00) -------------------------------------------------

@dataclass(frozen=True)
class PhoneNight:
    """The shop's night: hours of work vs hours on the phone, two ways of phoning."""
    branches: int
    lines: int
    lines_per_second: float
    work_hours: float
    head_office_hours: float     # every branch reads to head office, which reads the sum back
    ring_hours: float            # each branch phones only its neighbour (ring all-reduce)

    def __repr__(self) -> str:
        return "PhoneNight(" + _("{branches} branches, {lines} lines at {rate:g}/s: head office {ps}, ring "
                                 "{ring}, work {work}").format(
            branches=self.branches, lines=self.lines, rate=self.lines_per_second,
            ps=seconds(self.head_office_hours * 3600), ring=seconds(self.ring_hours * 3600),
            work=seconds(self.work_hours * 3600)) + ")"


def phone_night(branches: int = 64, lines: int = 5000, lines_per_second: float = 0.5,
                work_hours: float = 0.5) -> PhoneNight:
    """The story in the cost model's units: a report of `lines` lines read at
    `lines_per_second` down one phone line per shop (one line = one unit of data)."""
    check_int(branches, "branches", 1), check_int(lines, "lines", 1)
    line = cost.Link(bandwidth=lines_per_second)
    ps = cost.parameter_server_time(lines, branches, line) / 3600
    ring = cost.ring_allreduce_time(lines, branches, line) / 3600
    return PhoneNight(branches, lines, float(lines_per_second), float(work_hours), ps, ring)


def waiting_share(compute: float, comm: float) -> float:
    """The share of a step spent waiting: comm / (compute + comm)."""
    return cost.waiting_fraction(compute, comm)


def seconds(x: float) -> str:
    """A duration in words a reader can compare: ms, s, min, h or days."""
    if not math.isfinite(x):
        return str(x)
    for unit, size in ((N_("days"), 86400), (N_("h"), 3600), (N_("min"), 60), (N_("s"), 1)):
        if x >= size:
            return f"{x / size:.3g} {_(unit)}"
    return f"{x * 1e3:.3g} ms"


@dataclass
class Scissors:
    """Compute and bandwidth, both relative to year 0, and the gap between them (the figure:
    milktea.plots.bottleneck.scissors)."""
    years: np.ndarray
    compute: np.ndarray
    bandwidth: np.ndarray

    @property
    def gap(self) -> np.ndarray:
        return self.compute / self.bandwidth


# How hardware grew over twenty years, per two years (Gholami et al., "AI and Memory Wall",
# IEEE Micro 2024): peak FLOP/s of server hardware, DRAM bandwidth, interconnect bandwidth.
# Chapters 01 and 08 both read them from here.
TRENDS = {"compute": 3.0, "DRAM": 1.6, "interconnect": 1.4}
TRENDS_SOURCE = "Gholami et al. 2024"


def per_year(every_two_years: float) -> float:
    """A growth factor per two years as one per year: sqrt(3.0) = 1.73 for 3.0x."""
    return math.sqrt(check_number(every_two_years, "growth", 0, open_low=True))


def scissors(years: float = 10, compute_growth: float | None = None, bandwidth_growth: float | None = None,
             points: int = 50) -> Scissors:
    """The compute/bandwidth gap: compute multiplies by `compute_growth` a year, bandwidth by
    `bandwidth_growth` (slower), both start at 1. The defaults are TRENDS' compute and
    interconnect rates (3.0x and 1.4x every two years).

    >>> round(float(scissors(10).gap[-1]))    # (3.0 / 1.4)^5
    45
    """
    compute_growth = per_year(TRENDS["compute"]) if compute_growth is None else compute_growth
    bandwidth_growth = per_year(TRENDS["interconnect"]) if bandwidth_growth is None else bandwidth_growth
    years = check_number(years, "years", 0, open_low=True)
    cg = check_number(compute_growth, "compute_growth", 0, open_low=True)
    bg = check_number(bandwidth_growth, "bandwidth_growth", 0, open_low=True)
    points = check_int(points, "points", 2)
    t = np.linspace(0.0, years, points)
    return Scissors(t, cg ** t, bg ** t)
