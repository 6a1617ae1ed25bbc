"""A measured comparison re-priced on other links: what each scheme's step would have taken
if only the link had been different (beside `report.predict_step`, which prices one step).

The measured compute and codec time stay; the collectives each step really issued are
priced by the cost model on the new link; and, by default, what the model did not explain on
the run's own link (the residual) is kept as measured, so on that link the re-priced time is
the measured one. `codec=` replaces the measured codec time as well (`gpu_codecs`: what a
memory-bound codec would take at an assumed GPU memory bandwidth), keeping the rest.

`crossings` (milktea.crossings) finds where a re-priced speedup passes 1, in either
direction: a curve can fall through 1 (compression stops paying as the link gets faster)
or rise through it (the baseline's own costs start to dominate).

    >>> [(round(c.at), c.direction) for c in crossings([1, 10, 100], [2.0, 1.5, 0.5])]
    [(23, 'down')]
    >>> [(round(c.at), c.direction) for c in crossings([1, 10, 100], [0.5, 0.9, 1.2])]
    [(23, 'up')]
"""
from __future__ import annotations


from milktea import cost
from milktea.crossings import Crossing, crossings  # noqa: F401  (reprice.crossings: where a curve passes 1)
from milktea.distributed.report import predict_step
from milktea.timing import median

#: Bytes a memory-bound codec moves per parameter (compress and decode together), by scheme:
#: casts read fp32 and write 16 bits, then read them back and write fp32; the others as
#: milktea.advice.BYTES_MOVED prices them. An ASSUMPTION (kernels that stream at the memory's
#: bandwidth), used only where a sentence says so; schemes not listed keep their measured codec.
GPU_BYTES_PER_PARAM = {
    "dense": 0.0, "torch-fp16": 12.0, "torch-bf16": 12.0, "fp16": 12.0, "bf16": 12.0,
    "int8": 14.0, "int4": 13.0, "powersgd": 12.0, "powersgd-batched": 12.0, "torch-powersgd": 12.0,
    "torch-batched-powersgd": 12.0, "topk": 16.0, "topk-approx": 16.0, "topk-mc": 16.0, "auto": 16.0,
    "topk-int8": 18.0, "sign": 12.25, "sign-mc": 12.25,
}


def gpu_codecs(comparison, mem_gbps: float = 2000.0) -> dict:
    """{label: codec seconds per step} that a GPU would take for each scheme of `comparison`,
    *assuming* memory-bound kernels at `mem_gbps` GB/s that move GPU_BYTES_PER_PARAM bytes per
    parameter (an assumption to state beside any number it gives: no GPU timed them). Schemes
    without an entry are left out, so re-pricing keeps their measured codec.

    >>> from types import SimpleNamespace
    >>> run = SimpleNamespace(results=[{"scheme": "torch-bf16", "label": "bf16", "params": 1_000_000}])
    >>> round(gpu_codecs(run, 2000.0)["bf16"] * 1e6, 1)     # 12 MB at 2 TB/s: 6 microseconds
    6.0
    """
    if not mem_gbps > 0:
        raise ValueError(f"mem_gbps must be > 0 (GB/s of memory bandwidth), got {mem_gbps!r}")
    out = {}
    for res in comparison.results:
        per = GPU_BYTES_PER_PARAM.get(res.get("scheme"))
        if per is not None and "params" in res:
            out[res["label"]] = per * res["params"] / (mem_gbps * 1e9)
    return out


def repriced_times(comparison, link: cost.Link, keep_residual: bool = True, codec: dict | None = None) -> dict:
    """{label: step seconds} of each scheme of a measured `milktea.distributed.compare` run, if
    its link had been `link`: the measured compute and codec time stay, and the collectives each
    step really issued are priced by the cost model (median over the timed steps).

    keep_residual: also keep, step by step, what the cost model did not explain on the run's own
    link (measured step minus its prediction there: stragglers, Python work in the hook, waiting
    for the slower rank). Then on the run's own link the re-priced time *is* the measured one,
    and the what-if only moves what the link changes. A residual below zero never takes a step
    below its compute and codec (its time with no link at all). Without it, the pure model.

    codec: {label: seconds per step} to put in place of the measured codec time (compress and
    decode) of those schemes (e.g. `gpu_codecs(comparison)`); the residual is still taken
    against the measured codec, so only the link and the codec change."""
    codec = codec or {}
    out = {}
    for res in comparison.results:
        if "records" not in res:
            continue
        recs = res["records"][comparison.skip:] or res["records"]
        swap = res["label"] in codec
        ts = []
        for r in recs:
            compute = r.get("compute", comparison.compute)
            what_if = dict(r, compress_s=codec[res["label"]], decode_s=0.0) if swap else r
            t = predict_step(compute, what_if, link, comparison.workers)
            if keep_residual and "step_s" in r:
                t += r["step_s"] - predict_step(compute, r, comparison.model_link, comparison.workers)
                # a residual below zero (the model priced more than the run spent) cannot take a
                # step below its own compute and codec: what it would take with no link at all
                t = max(t, predict_step(compute, dict(what_if, ops=[]), link, comparison.workers))
            ts.append(t)
        out[res["label"]] = median(ts)
    return out


def reprice(comparison, gbits, latency: float | None = None, keep_residual: bool = True,
            baseline: str | None = None, codec: dict | None = None) -> dict:
    """Speedup over a baseline of each scheme of a measured comparison, re-priced on links of
    other bandwidths (see `repriced_times`). `baseline`: the label of the run to divide by (by
    default the dense fp32 run; pass the bf16 run's label for speedups over bf16); `codec`: see
    `repriced_times`. Returns {"gbit": [...], label: [speedup, ...]} for every other run."""
    latency = comparison.model_link.latency if latency is None else latency
    per_link = [repriced_times(comparison, cost.Link.gbit(b, latency), keep_residual, codec) for b in gbits]
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
