"""Engineering measurements: bucketed overlap predicted by the cost model, index encodings
measured in bytes, gradient accumulation, and where compression stops paying.

    >>> prof = Profile.uniform(layers=8, params_per_layer=1_000_000, backward_s=0.08)
    >>> tl = predict_timeline(prof, bucket_mb=8, link=cost.Link.gbit(10), workers=8, forward_s=0.04)
    >>> tl.total < tl.serial                     # overlap hides part of the communication
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import cost
from .. import index as index_codec
from ..checks import check_grad, check_positive_int, check_ratio
from ..i18n import _
from ..compressors import TopK
from ..timing import codec_seconds  # noqa: F401  (re-exported: the chapters call it from here)
from ..timing import median


@dataclass
class Profile:
    """A model as the backward pass sees it: per-parameter-tensor element counts and seconds
    of backward compute, in the order backward produces them (last layer first)."""
    params: list[int]
    backward_s: list[float]
    bytes_per_param: int = 4

    def __post_init__(self):
        if len(self.params) != len(self.backward_s) or not self.params:
            raise ValueError(f"need one backward time per tensor (>= 1), got {len(self.params)} and "
                             f"{len(self.backward_s)}")
        if any(p < 1 for p in self.params) or any(not t >= 0 for t in self.backward_s):
            raise ValueError("params must be >= 1 and backward times >= 0")

    @classmethod
    def uniform(cls, layers: int, params_per_layer: int, backward_s: float) -> "Profile":
        """`layers` equal tensors sharing `backward_s` seconds of backward."""
        check_positive_int(layers, "layers"), check_positive_int(params_per_layer, "params_per_layer")
        return cls([params_per_layer] * layers, [backward_s / layers] * layers)

    @property
    def total_params(self) -> int:
        return sum(self.params)


def buckets(profile: Profile, bucket_mb: float) -> list[tuple[int, float]]:
    """Group tensors into buckets in backward order, as DDP does: a bucket closes once it
    holds at least `bucket_mb` MB. Returns (bytes, backward seconds) per bucket."""
    if not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
    cap = bucket_mb * 1024 * 1024
    out, nbytes, secs = [], 0, 0.0
    for p, t in zip(profile.params, profile.backward_s):
        nbytes += p * profile.bytes_per_param
        secs += t
        if nbytes >= cap:
            out.append((nbytes, secs))
            nbytes, secs = 0, 0.0
    if nbytes:
        out.append((nbytes, secs))
    return out


def predict_timeline(profile: Profile, bucket_mb: float, link: cost.Link, workers: int,
                     forward_s: float = 0.0, ratio: float = 1.0, collective: str = "allreduce") -> cost.Timeline:
    """The cost model's Gantt chart of one step: forward, then the buckets' backward, each
    bucket's exchange (bytes / `ratio`) starting when it is ready and the link is free."""
    if not ratio >= 1:
        raise ValueError(f"ratio (compression ratio R) must be >= 1, got {ratio}")
    bs = buckets(profile, bucket_mb)
    comm = [cost.comm_time(b / ratio, workers, link, collective) for b, _names in bs]
    return cost.overlapped_timeline([t for _size, t in bs], comm, forward=forward_s)


def bucket_sweep(profile: Profile, link: cost.Link, workers: int, forward_s: float = 0.0,
                 sizes_mb=(0.25, 0.5, 1, 2, 4, 8, 16, 25, 50, 100, 200, 400)) -> list[dict]:
    """Predicted step time for each bucket size: too small pays the per-message latency many
    times, too large leaves nothing to overlap."""
    rows = []
    for mb in sizes_mb:
        tl = predict_timeline(profile, mb, link, workers, forward_s)
        rows.append({"bucket MB": mb, "buckets": len(tl.comm), "step s": tl.total,
                     "exposed comm s": tl.exposed_comm, "serial s": tl.serial})
    return rows


def median_step(steps: list[dict], skip: int = 1) -> dict:
    """The step (as the overlap probe records it) with the median duration, after `skip`
    warm-up steps."""
    rest = steps[skip:] or steps
    if not rest:
        raise ValueError("no measured steps")
    return median(rest, key=lambda s: s["end"] - s["forward"][0])


def measured_timeline(step: dict) -> cost.Timeline:
    """A Timeline from one measured step: forward start/end, and per bucket when its gradient
    was ready and when its exchange ended. The link serves buckets in order, so an exchange
    starts at max(ready, end of the previous one)."""
    t0 = step["forward"][0]
    fwd = (0.0, step["forward"][1] - t0)
    back, comm, prev, link_free = [], [], fwd[1], 0.0
    for ready, done in step["buckets"]:
        r, d = ready - t0, done - t0
        back.append((prev, r))
        start = max(r, link_free)
        comm.append((start, d))
        prev, link_free = r, d
    serial = fwd[1] + sum(e - s for s, e in back) + sum(e - s for s, e in comm)
    return cost.Timeline(fwd, back, comm, step["end"] - t0, serial=serial)


def predict_from_probe(step: dict, link: cost.Link, workers: int, merge: bool = False,
                       ratio: float = 1.0) -> cost.Timeline:
    """The cost model's timeline for a measured compute-only step: its forward time and each
    bucket's backward time, with each bucket's all-reduce priced on `link` (bytes / `ratio`).
    `merge=True` predicts the same model sent as one bucket (no overlap)."""
    t0, t1 = step["forward"]
    readies = [r for r, _size in step["buckets"]]
    back = [b - a for a, b in zip([t1] + readies[:-1], readies)]
    sizes = list(step["bytes"])
    if merge:
        back, sizes = [sum(back)], [sum(sizes)]
    comm = [cost.ring_allreduce_time(b / ratio, workers, link) for b in sizes]
    return cost.overlapped_timeline(back, comm, forward=t1 - t0)


# --- index encodings ------------------------------------------------------------------------

def block_topk(x: torch.Tensor, ratio: float, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-sparse selection: keep the ceil(ratio n / block) blocks of `block` consecutive
    entries with the largest norms. Returns (sorted block ids, the flat indices they cover)."""
    x = check_grad(x, "x").reshape(-1)
    check_ratio(ratio), check_positive_int(block, "block")
    n = x.numel()
    nblocks = (n + block - 1) // block
    pad = torch.nn.functional.pad(x.float(), (0, nblocks * block - n))
    norms = pad.view(nblocks, block).pow(2).sum(1)
    keep = max(1, min(nblocks, math.ceil(ratio * n / block)))
    ids = norms.topk(keep).indices.sort().values
    flat = (ids[:, None] * block + torch.arange(block)).reshape(-1)
    return ids, flat[flat < n]


def index_costs(x: torch.Tensor, ratios=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3), block: int = 32) -> list[dict]:
    """Index bytes per kept entry for Top-K's positions in each encoding (exact sizes from
    milktea.index), and for block-sparse selection (block ids, delta-encoded), with the share
    of the gradient's squared norm each selection keeps."""
    x = check_grad(x, "x").reshape(-1).float()
    n, norm2 = x.numel(), float(x.pow(2).sum())
    rows = []
    for r in ratios:
        idx = TopK(r).select(x)
        k = idx.numel()
        s = index_codec.sizes(idx, n)
        ids, flat = block_topk(x, r, block)
        _nbytes, enc = index_codec.encode(ids, (n + block - 1) // block)
        row = {"ratio": r, "k": k, **{f"{e} B/entry": s[e] / k for e in index_codec.ENCODINGS},
               f"block{block} B/entry": enc.numel() / flat.numel(),
               "top-k norm kept": float(x[idx].pow(2).sum()) / norm2,
               f"block{block} norm kept": float(x[flat].pow(2).sum()) / norm2,
               "block values": flat.numel()}
        rows.append(row)
    return rows


def escapes(x: torch.Tensor, ratio: float) -> dict:
    """How often a 1-byte gap is not enough: Top-K positions of `x`, gaps >= 255 need escapes."""
    x = check_grad(x, "x").reshape(-1)
    idx = TopK(ratio).select(x.float())
    gaps = torch.diff(idx, prepend=torch.tensor([-1])) - 1
    return {"k": idx.numel(), "numel": x.numel(), "largest gap": int(gaps.max()),
            "gaps >= 255": int((gaps >= 255).sum()), "escape bytes": int((gaps // 255).sum()),
            "delta8 bytes": index_codec.sizes(idx, x.numel())["delta8"]}


# --- overheads and break-even ---------------------------------------------------------------

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


# --- gradient accumulation ------------------------------------------------------------------

def accumulation_time(compute_s: float, comm_s: float, accumulate) -> list[dict]:
    """Seconds per micro-batch when the gradient is exchanged once every `a` micro-batches:
    (a * compute + comm) / a. Communication per sample falls as 1/a."""
    rows = []
    for a in accumulate:
        check_positive_int(a, "accumulate")
        rows.append({"accumulate": a, "s per micro-batch": (a * compute_s + comm_s) / a,
                     "comm share": comm_s / (a * compute_s + comm_s)})
    return rows


@dataclass
class Accumulated:
    accumulate: int
    history: object
    exchanges: int
    mb_per_worker: float
    accuracy: float = field(default=0.0)


def accumulation_runs(task, accumulate=(1, 2, 4, 8), micro_batch: int = 16, samples: int = 3200,
                      workers: int = 8, lr: float = 0.1, scale_lr: bool = True, compressor=None,
                      device=None) -> list[Accumulated]:
    """Train on the same number of samples per worker, exchanging every `a` micro-batches.
    Accumulating `a` micro-batches of b and stepping once is one step with a batch of a*b, so
    each run is the simulator with batch a*b and samples/(a*b) steps; `scale_lr` multiplies
    the learning rate by `a` (the linear scaling rule for a batch `a` times larger)."""
    from ..simulate import simulate
    out = []
    for a in accumulate:
        steps = max(1, samples // (a * micro_batch))
        h = simulate(task, compressor, workers=workers, steps=steps, lr=lr * a if scale_lr else lr,
                     batch=a * micro_batch,
                     eval_every=max(1, steps // 10), device=device, progress=False)
        out.append(Accumulated(a, h, steps, h.total_bytes / workers / 1e6, h.final("accuracy")))
    return out


# --- re-pricing a measured comparison on other links --------------------------------------

def repriced_times(comparison, link: cost.Link, keep_residual: bool = True) -> dict:
    """{label: step seconds} of each scheme of a measured `milktea.distributed.compare` run, if
    its link had been `link`: the measured compute and codec time stay, and the collectives each
    step really issued are priced by the cost model (median over the timed steps).

    keep_residual: also keep, step by step, what the cost model did not explain on the run's own
    link (measured step minus its prediction there: stragglers, Python work in the hook, waiting
    for the slower rank). Then on the run's own link the re-priced time *is* the measured one,
    and the what-if only moves what the link changes. Without it, the pure model is returned."""
    from ..distributed.report import predict_step
    out = {}
    for res in comparison.results:
        if "records" not in res:
            continue
        recs = res["records"][comparison.skip:] or res["records"]
        ts = []
        for r in recs:
            compute = r.get("compute", comparison.compute)
            t = predict_step(compute, r, link, comparison.workers)
            if keep_residual and "step_s" in r:
                t += r["step_s"] - predict_step(compute, r, comparison.model_link, comparison.workers)
            ts.append(t)
        out[res["label"]] = median(ts)
    return out


def reprice(comparison, gbits, latency: float | None = None, keep_residual: bool = True) -> dict:
    """Speedup over dense of each scheme of a measured comparison, re-priced on links of other
    bandwidths (see `repriced_times`). Returns {"gbit": [...], label: [speedup, ...]}."""
    latency = comparison.model_link.latency if latency is None else latency
    per_link = [repriced_times(comparison, cost.Link.gbit(b, latency), keep_residual) for b in gbits]
    dense = next((k for k in per_link[0] if k.startswith("dense")), None)
    if dense is None:
        raise ValueError("the comparison has no dense run to compare against")
    out = {"gbit": list(gbits)}
    for label in per_link[0]:
        if label != dense:
            out[label] = [t[dense] / t[label] for t in per_link]
    return out


def crossing(gbits, speedups) -> float:
    """The bandwidth where a speedup curve falls through 1 (log-interpolated); inf if it never
    does on the grid, 0 if it starts below 1."""
    if speedups[0] < 1:
        return 0.0
    for (b0, s0), (b1, s1) in zip(zip(gbits, speedups), zip(gbits[1:], speedups[1:])):
        if s0 >= 1 > s1:
            f = math.log(s0) / (math.log(s0) - math.log(s1))
            return math.exp(math.log(b0) + f * (math.log(b1) - math.log(b0)))
    return math.inf


def model_errors(comparison) -> list[dict]:
    """Where the cost model misses, per scheme of a measured comparison: measured and predicted
    step, and the time inside the collectives, measured and as the model prices the collectives
    the steps really issued (on the calibrated link). Medians over the timed steps (ms)."""
    out = []
    for res in comparison.results:
        if "records" not in res:
            continue
        recs = res["records"][comparison.skip:] or res["records"]
        priced = median(sum(cost.comm_time(n, comparison.workers, comparison.model_link, kind)
                            for kind, n in r.get("ops") or []) for r in recs)
        row = next(r for r in comparison.rows if r["label"] == res["label"])
        out.append({"scheme": res["label"], "measured ms": row["step_ms"], "predicted ms": row["predicted_ms"],
                    "model error": row["step_ms"] / row["predicted_ms"] - 1,
                    "collectives, measured ms": row.get("comm_ms", float("nan")),
                    "collectives, priced ms": 1e3 * priced})
    return out


def model_error_sentence(comparison, tolerance: float = 0.2) -> str:
    """One paragraph on the cost model's misses in a measured comparison, from its numbers."""
    rows = model_errors(comparison)
    good = [r["scheme"] for r in rows if abs(r["model error"]) <= tolerance]
    bad = [r for r in rows if abs(r["model error"]) > tolerance]
    text = (_("The cost model is within ±{tolerance:.0%} of the measured step for {v}.").format(tolerance=tolerance, v=', '.join(good) if good else _('no scheme')))
    for r in bad:
        gap = r["measured ms"] - r["predicted ms"]
        inside = r["collectives, measured ms"] - r["collectives, priced ms"]
        where = _("inside") if abs(inside) >= abs(gap) / 2 else _("mostly outside")
        text += (_(" **{v}**: predicted {v2:.1f} ms, measured {v3:.1f} ms ({v4:+.0%}); its collectives took {v5:.1f} ms against {v6:.1f} ms priced, so {inside:.1f} of the {gap:.1f} ms gap is {where} the collectives.").format(v=r['scheme'], v2=r['predicted ms'], v3=r['measured ms'], v4=r['model error'], v5=r['collectives, measured ms'], v6=r['collectives, priced ms'], inside=inside, gap=gap, where=where))
    if bad:
        text += (_(" Inside the collectives the model misses waiting for the other rank and each collective's fixed costs beyond the fitted α (PowerSGD issues two all-reduces one after the other, a sparse all-gather first exchanges sizes); outside them, the hook's own work that the codec timer does not cover. Read the predictions as a guide to where time goes, not as a stopwatch."))
    return text


# --- verdicts of the A/B chapter, in words, from a measured comparison ----------------------

def ab_verdict(comparison) -> str:
    """Dense's step, the fastest scheme and its speedup, in one paragraph."""
    rows = [r for r in comparison.rows if "error" not in r]
    dense = rows[0]
    fastest = max((r for r in rows if "speedup" in r), key=lambda r: r["speedup"])
    return (_("{where}, {workers} workers. Dense takes **{v:.0f} ms** per step; the fastest scheme here, {v2}, takes **{v3:.0f} ms** ({v4:.2f}x). The crosses mark the calibrated cost model's prediction from the bytes each scheme really sent plus its measured compute and codec time; the orange part is the time measured inside the collectives, the grey part what none of the measured parts accounts for. Where a compressed scheme is slower than its bytes suggest, look at its codec time: on a CPU, compressing can cost as much as the link saves.").format(where=comparison.where, workers=comparison.workers, v=dense['step_ms'], v2=fastest['label'], v3=fastest['step_ms'], v4=fastest['speedup']))


def behind_dense(comparison, points: float = 5.0) -> str:
    """A line naming the schemes more than `points` accuracy points behind dense ('' if none)."""
    rows = [r for r in comparison.rows if "error" not in r]
    dense = rows[0]
    behind = [r["label"] for r in rows[1:] if r.get("accuracy", 1) < dense["accuracy"] - points / 100]
    if not behind:
        return ""
    return (_("More than {points:g} points behind dense after {v} steps: {v2} (all runs share dense SGD's learning rate and momentum; biased compressors usually want their own).").format(points=points, v=comparison.config['steps'], v2=', '.join(behind)))


def crossing_lines(gbits, curves: dict) -> list[str]:
    """For each re-priced curve: where compression stops paying, in words."""
    out = []
    for label, speedups in curves.items():
        if label == "gbit":
            continue
        b = crossing(gbits, speedups)
        where = (_("pays on every link tried") if b == math.inf else
                 _("never pays here") if b == 0 else _("stops paying above {b:.2g} Gbit/s").format(b=b))
        out.append(f"{label:<34} {where}")
    return out


def loopback_verdict(fast, slow_dense_ms: float) -> str:
    """What the loopback run (no emulated link) says, from its numbers."""
    rows = [r for r in fast.rows if "error" not in r]
    dense = rows[0]
    slower = [r["label"] for r in rows[1:] if r.get("speedup", 1) < 1]
    text = (_("On loopback a dense step takes {v:.1f} ms, {v2:.1f} ms of it inside the all-reduce, against {slow_dense_ms:.0f} ms on the 1 Gbit/s link. {v3} of {v4} compressed schemes are slower than dense here").format(v=dense['step_ms'], v2=dense['comm_ms'], slow_dense_ms=slow_dense_ms, v3=len(slower), v4=len(rows) - 1) + (f": {', '.join(slower)}." if slower else "."))
    if len(slower) == len(rows) - 1:
        return text + _(" When the link is not the bottleneck, the best compressor is none.")
    return text + (_(" Even loopback is not free on a busy CPU (the bytes are copied through the kernel), so a scheme with a cheap codec can still win a little here; the re-priced curves above show a link that is really fast."))


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
