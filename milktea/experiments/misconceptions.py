"""Common misconceptions about gradient compression, each checked by a computation.

Every function returns a `Verdict`: the claim, the numbers measured or computed here, a
sentence built from them, and `busted` (True when the numbers contradict the claim, False
when they bear it out, None when this run cannot tell). Every sentence is built from the
numbers, so it says the opposite when they turn; timings are warmed up, taken in turns and
repeated, and a timed difference within their spread is said to be none. The deciding part
of each timed myth is a function of numbers (`int4_verdict`, `fp16_verdict`), which the
tests feed adversarial numbers, never timings.

    >>> v = one_byte_index()
    >>> v.busted, v.numbers["largest gap"] > 255
    (True, True)
"""
from __future__ import annotations

import zlib

import torch

from .. import cost
from ..compressors import RandomK, TopK
from ..i18n import _, count
from . import indexcost, verdicts
from . import overlap as ov
from . import quantization as qx
from .myth import Verdict
from .timed_myths import (compression_always_pays, fp16_always_faster, fp16_verdict,  # noqa: F401
                          int4_halves_time, int4_verdict, pays_verdict)


def _gradient(hidden: int = 256) -> torch.Tensor:
    return qx.digits_gradient(hidden=hidden)


def topk_without_feedback(steps: int = 100, workers: int = 8, ratio: float = 0.01) -> Verdict:
    """Digits, simulated workers: Top-K with and without the ledger."""
    from ..simulate import simulate
    from ..tasks import Digits
    task = Digits(hidden=32)
    run = dict(workers=workers, steps=steps, lr=0.1, eval_every=steps, progress=False)
    acc = {name: simulate(task, c, error_feedback=ef, **run).final("accuracy")
           for name, c, ef in (("dense", None, False), ("plain", TopK(ratio), False), ("ef", TopK(ratio), True))}
    text = (_("after {steps} steps: dense {v:.1%}, Top-{v2:g}% without the ledger {v3:.1%}, with it {v4:.1%}.").format(steps=steps, v=acc['dense'], v2=100 * ratio, v3=acc['plain'], v4=acc['ef']))
    return Verdict(_("Top-K without error feedback is fine"), acc, text, acc["plain"] < acc["ef"] - 0.05)


def one_byte_index(ratio: float = 0.001) -> Verdict:
    """Gaps between Top-K positions of a real gradient, against what one byte can hold."""
    e = indexcost.escapes(_gradient(2048), ratio)
    per = e["delta8 bytes"] / e["k"]
    text = _("one byte holds 0..255, but the tensor has {v:,} positions; between the {v2} kept entries the largest gap "
             "is {v3:,}. Gaps in 1-byte deltas need {v4} escape bytes: {v5} bytes for {v2} indices, {v6:.1f} per "
             "index").format(v=e['numel'], v2=e['k'], v3=e['largest gap'], v4=e['escape bytes'], v5=e['delta8 bytes'],
                             v6=per)
    text += (_(", more than int32's 4.") if per > 4 else _(", as many as int32's 4.") if per == 4 else
             _(", still fewer than int32's 4: the escapes cost, but the gaps are mostly short."))
    return Verdict(_("A 1-byte index can address any position"), e, text, e["largest gap"] > 255)


def ratio_is_speedup(workers: int = 64, ratio: float = 0.01, gbit: float = 10.0, params: int = 25_000_000) -> Verdict:
    """Top-K packets cannot be summed on the wire: all-gather (N-1) M / R vs all-reduce 2(N-1)/N M."""
    x = torch.randn(1_000_000, generator=torch.Generator().manual_seed(0))
    R = TopK(ratio).compress(x).ratio
    M = cost.gradient_bytes(params)
    link = cost.Link.gbit(gbit)
    dense = cost.ring_allreduce_time(M, workers, link)
    sparse = cost.allgather_time(M / R, workers, link)
    gain = dense / sparse
    if gain >= 1:
        text = _("Top-{v:g}% packets are {R:.0f}x smaller, but with {workers} workers they must be all-gathered: "
                 "communication drops from {dense:.3f} s to {sparse:.3f} s, {v2:.1f}x.").format(
            v=100 * ratio, R=R, workers=workers, dense=dense, sparse=sparse, v2=gain)
    else:
        text = _("Top-{v:g}% packets are {R:.0f}x smaller, but with {workers} workers they must be all-gathered: "
                 "communication grows from {dense:.3f} s to {sparse:.3f} s.").format(
            v=100 * ratio, R=R, workers=workers, dense=dense, sparse=sparse)
    return Verdict(_("A compression ratio of R makes communication R times faster"),
                   {"R": R, "comm speedup": dense / sparse}, text, dense / sparse < R / 2)


def stochastic_more_accurate() -> Verdict:
    """Error of one stochastically rounded copy vs one rounded to nearest (2 bits)."""
    b = qx.rounding_bias(_gradient(), bits=2, draws=16)
    e = b.per_draw_error
    text = _("one 2-bit copy of a real gradient: relative error {v:.2f} with stochastic rounding, {v2:.2f} rounding to "
             "nearest.").format(v=e['stochastic'], v2=e['nearest'])
    if e["stochastic"] > e["nearest"]:
        text += " " + _("Stochastic rounding buys unbiasedness, not accuracy.")
    else:
        text += " " + _("Here stochastic rounding was as accurate or more: its point is unbiasedness all the same.")
    return Verdict(_("Stochastic rounding is more accurate than rounding to nearest"), e, text,
                   e["stochastic"] > e["nearest"])


def feedback_is_free(params: float = 7e9) -> Verdict:
    """The ledger is one full-size tensor per worker."""
    from ..feedback import ErrorFeedback
    g = torch.randn(100_000)
    ef = ErrorFeedback(TopK(0.01))
    ef.compress(g)
    per_param = ef.residual.element_size() * ef.residual.numel() / g.numel()
    extra = per_param * params / 1e9
    text = (_("the ledger holds {per_param:.0f} bytes per parameter (measured on a real ErrorFeedback): for a {v:g}B-parameter model that is {extra:.0f} GB more memory on every worker.").format(per_param=per_param, v=params / 1e9, extra=extra))
    return Verdict(_("Error feedback is free"), {"bytes per param": per_param, "GB": extra}, text, extra > 0)


def bigger_buckets_better(params: int = 25_000_000, workers: int = 64, gbit: float = 25.0) -> Verdict:
    """Cost-model step time as the bucket grows to the whole model."""
    prof = ov.Profile.uniform(160, params // 160, 0.1)
    rows = ov.bucket_sweep(prof, cost.Link.gbit(gbit), workers, 0.05, sizes_mb=(4, 16, 25, 100))
    best = min(rows, key=lambda r: r["step s"])
    one = rows[-1]
    text = _("{params} parameters, {workers} workers, {gbit:g} Gbit/s: {v2:g} MB buckets give {v3:.0f} ms per step, one "
             "{v4:g} MB bucket {v5:.0f} ms").format(params=count(params), workers=workers, gbit=gbit,
                                                   v2=best['bucket MB'], v3=1e3 * best['step s'],
                                                   v4=one['bucket MB'], v5=1e3 * one['step s'])
    text += (_(": one bucket cannot start until backward ends.") if one["step s"] > best["step s"] else
             _(": here the largest bucket is as good as any."))
    return Verdict(_("Bigger buckets always give better overlap"), {"best": best, "one": one}, text,
                   one["step s"] > best["step s"])


def one_scale_enough() -> Verdict:
    """int4 with one outlier: one scale per tensor vs per 1024 entries."""
    rows = qx.chunk_sweep(qx.with_outlier(_gradient(), 100.0), bits=4, chunks=(None, 1024), skip=0)
    text = (_("one entry 100x the rest: with one int4 scale for the tensor {v:.0%} of the other entries arrive as 0; with one scale per 1024 entries {v2:.0%}.").format(v=rows[0]['zeroed'], v2=rows[1]['zeroed']))
    return Verdict(_("One scale per tensor is enough"), rows, text, rows[0]["zeroed"] > rows[1]["zeroed"])


def more_workers_less_comm(params: int = 25_000_000, gbit: float = 10.0, global_compute_s: float = 6.4) -> Verdict:
    """Fixed global batch: compute per worker shrinks as 1/N, ring all-reduce bytes do not."""
    link = cost.Link.gbit(gbit)
    M = cost.gradient_bytes(params)
    shares = {}
    for n in (8, 64):
        comm = cost.ring_allreduce_time(M, n, link)
        shares[n] = comm / (global_compute_s / n + comm)
    text = (_("same global batch ({global_compute_s:g} s of compute in all), {params} parameters, {gbit:g} Gbit/s: communication is {v2:.0%} of a step with 8 workers and {v3:.0%} with 64. Each worker still sends about 2x the model; its share of the work shrinks.").format(global_compute_s=global_compute_s, params=count(params), gbit=gbit, v2=shares[8], v3=shares[64]))
    return Verdict(_("More workers make compression matter less"), shares, text, shares[64] > shares[8])


def randomk_as_good() -> Verdict:
    """Share of a real gradient's squared norm kept by Top-1% and by Random-1%."""
    g = _gradient(2048)
    share = {}
    for name, c in (("top-k", TopK(0.01)), ("random-k", RandomK(0.01))):
        y = c.decompress(c.compress(g))
        share[name] = float(y.pow(2).sum() / g.pow(2).sum())
    text = (_("the same {kept:.0%} of entries: Top-K keeps {v:.0%} of the gradient's squared norm, Random-K {v2:.1%}.").format(kept=0.01, v=share['top-k'], v2=share['random-k']))
    return Verdict(_("Random-K is as good as Top-K for the same bytes"), share, text,
                   share["top-k"] > 2 * share["random-k"])


def zip_is_enough() -> Verdict:
    """Lossless zlib (level 9) on a real fp32 gradient."""
    g = _gradient(2048)
    raw = g.numpy().tobytes()
    ratio = len(raw) / len(zlib.compress(raw, 9))
    top = TopK(0.01).compress(g).ratio
    text = (_("zlib at level 9 shrinks a real fp32 gradient {ratio:.2f}x (random low mantissa bits do not compress); Top-{kept:.0%} gives {top:.0f}x.").format(ratio=ratio, kept=0.01, top=top))
    return Verdict(_("Lossless compression (zip) is enough"), {"zlib": ratio, "topk": top}, text, ratio < 2)



def momentum_shared(steps: int = 40, lr: float = 0.5, workers: int = 4, ratio: float = 0.01) -> Verdict:
    """The tiny GPT in the simulator: Top-1% with the ledger and the optimizer's momentum 0.9
    (dense SGD's settings), against the same with DGC's momentum correction (the momentum
    before the compressor, none in the optimizer), beside dense momentum SGD."""
    import warnings

    from ..feedback import DGC
    from ..simulate import simulate
    from .dgc import gpt_task
    task = gpt_task()
    run = dict(workers=workers, steps=steps, batch=8, lr=lr, progress=False, eval_every=steps, device="cpu")
    with warnings.catch_warnings():          # a diverging run is a result here, said below
        warnings.simplefilter("ignore", UserWarning)
        hs = {"dense": simulate(task, None, momentum=0.9, **run),
              "shared": simulate(task, TopK(ratio), error_feedback=True, momentum=0.9, **run),
              "corrected": simulate(task, DGC(ratio, momentum=0.9, approximate=False), momentum=0.0, **run)}

    def val(h):
        return h.final("loss") if h.diverged_at is None else float("nan")
    loss = {k: val(h) for k, h in hs.items()}
    trend = {k: verdicts.trend(sum(h.loss[:3]) / 3, sum(h.loss[-3:]) / 3 if h.diverged_at is None else float("nan"))
             for k, h in hs.items()}
    text = _("The one-block GPT, {workers} workers, {steps} steps at lr {lr:g}, Top-{pct:g}% with the ledger. With "
             "the optimizer's momentum 0.9, as dense SGD uses it, the training loss {t1} and the validation loss ends at "
             "{l1:.3f}; with momentum correction it {t2} and ends at {l2:.3f} ({gap}); dense momentum SGD {l0:.3f}.").format(
        workers=workers, steps=steps, lr=lr, pct=100 * ratio, t1=trend["shared"], l1=loss["shared"],
        t2=trend["corrected"], l2=loss["corrected"],
        gap=verdicts.gap(loss["corrected"], loss["shared"], _("the shared momentum"), 0.02, higher_is_better=False,
                         unit="", scale=1, digits=3), l0=loss["dense"])
    busted = verdicts.gap(loss["shared"], loss["corrected"], "", 0.02, higher_is_better=False, unit="",
                          scale=1).kind in ("behind", "nan")
    return Verdict(_("A biased compressor can share dense SGD's momentum"), loss, verdicts.tidy(text), busted)


ALL = (compression_always_pays, topk_without_feedback, one_byte_index, int4_halves_time, fp16_always_faster,
       ratio_is_speedup, stochastic_more_accurate, feedback_is_free, bigger_buckets_better, one_scale_enough,
       more_workers_less_comm, randomk_as_good, zip_is_enough, momentum_shared)
