"""A measured comparison re-priced on other links: what each scheme's step would have taken
if only the link had been different (beside `report.predict_step`, which prices one step).

The measured compute and codec time stay; the collectives each step really issued are
priced by the cost model on the new link; and, by default, what the model did not explain on
the run's own link (the residual) is kept as measured, so on that link the re-priced time is
the measured one.

    >>> crossing([1, 10, 100], [2.0, 1.5, 0.5]) > 10      # the speedup falls through 1 past 10
    True
"""
from __future__ import annotations

import math

from milktea import cost
from milktea.distributed.report import predict_step
from milktea.timing import median


def repriced_times(comparison, link: cost.Link, keep_residual: bool = True) -> dict:
    """{label: step seconds} of each scheme of a measured `milktea.distributed.compare` run, if
    its link had been `link`: the measured compute and codec time stay, and the collectives each
    step really issued are priced by the cost model (median over the timed steps).

    keep_residual: also keep, step by step, what the cost model did not explain on the run's own
    link (measured step minus its prediction there: stragglers, Python work in the hook, waiting
    for the slower rank). Then on the run's own link the re-priced time *is* the measured one,
    and the what-if only moves what the link changes. Without it, the pure model is returned."""
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


def reprice(comparison, gbits, latency: float | None = None, keep_residual: bool = True,
            baseline: str | None = None) -> dict:
    """Speedup over a baseline of each scheme of a measured comparison, re-priced on links of
    other bandwidths (see `repriced_times`). `baseline`: the label of the run to divide by (by
    default the dense fp32 run; pass the bf16 run's label for speedups over bf16). Returns
    {"gbit": [...], label: [speedup, ...]} for every other run."""
    latency = comparison.model_link.latency if latency is None else latency
    per_link = [repriced_times(comparison, cost.Link.gbit(b, latency), keep_residual) for b in gbits]
    if baseline is None:
        rows = getattr(comparison, "rows", None) or []
        dense = next((r["label"] for r in rows if r.get("scheme") == "dense" and r["label"] in per_link[0]),
                     next((k for k in per_link[0] if k.startswith("dense")), None))
        if dense is None:
            raise ValueError("the comparison has no dense run to compare against")
    elif baseline not in per_link[0]:
        raise ValueError(f"baseline {baseline!r} is not a finished run of this comparison: {list(per_link[0])}")
    else:
        dense = baseline
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
