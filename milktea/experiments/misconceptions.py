"""Common misconceptions about gradient compression, each checked by a computation.

Every function returns a `Verdict`: the claim, the numbers measured or computed here, a
sentence built from them, and `busted` (True when the numbers contradict the claim).

    >>> v = one_byte_index()
    >>> v.busted, v.numbers["largest gap"] > 255
    (True, True)
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from .. import cost
from ..compressors import Cast, Quantize, RandomK, TopK
from ..i18n import _, count
from ..timing import codec_seconds, time_it
from . import breakeven, indexcost, verdicts
from .bottleneck import seconds
from . import overlap as ov
from . import quantization as qx


@dataclass
class Verdict:
    claim: str
    numbers: dict
    text: str
    busted: bool

    def _repr_markdown_(self) -> str:
        head = _("**Busted.**") if self.busted else _("**Holds here.**")
        return f"{head} {self.text}"

    def __repr__(self) -> str:
        return f"Verdict({'busted' if self.busted else 'holds'}: {self.text})"


def _gradient(hidden: int = 256) -> torch.Tensor:
    return qx.digits_gradient(hidden=hidden)


def compression_always_pays(params: int = 25_000_000, workers: int = 8, compute_s: float = 0.1,
                            fast_gbit: float = 100.0, slow_gbit: float = 0.1, numel: int = 1_000_000,
                            gpu_gbps: float = 2000.0) -> Verdict:
    """Top-1% + int8 on a fast and a slow link, priced twice: with this machine's measured
    codec time and with a data-centre GPU's memory-bound codec (`advice.memory_bound_codecs`),
    so that the verdict does not rest on a CPU codec alone."""
    from ..advice import memory_bound_codecs
    from ..compressors import Chain
    comp = Chain(TopK(0.01), Quantize(8))
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    ratio = comp.compress(x).ratio
    codecs = {_("this machine"): codec_seconds(comp, numel) * params / numel,
              _("a GPU assumed to run it at {gbps:g} GB/s of memory bandwidth").format(gbps=gpu_gbps):
                  memory_bound_codecs(gpu_gbps)["topk1%+int8+EF"] * 1e-9 * params}
    speed = {}
    for where, codec in codecs.items():
        s = breakeven.Scheme("top1%+int8", ratio, "allgather", codec)
        speed[where] = breakeven.speedup_vs_bandwidth([s], params, compute_s, workers, [slow_gbit, fast_gbit])["top1%+int8"]
    text = _("{params} parameters, {workers} workers, {compute_s:g} s of compute. Top-1%+int8 against dense: ").format(
        params=count(params), workers=workers, compute_s=compute_s)
    text += _("; ").join(_("with the codec of {where} ({codec} per step), {slow} on {slow_gbit:g} Gbit/s and {fast} on "
                           "{fast_gbit:g} Gbit/s").format(where=where, codec=seconds(codecs[where]),
                                                        slow=verdicts.speedup(sp[0]), slow_gbit=slow_gbit,
                                                        fast=verdicts.speedup(sp[1]), fast_gbit=fast_gbit)
                         for where, sp in speed.items()) + _(".")
    fast = min(sp[1] for sp in speed.values())
    best_fast = max(sp[1] for sp in speed.values())
    if best_fast < 1:
        text += " " + _("On the fast link it loses with either codec: there is little link time left to save.")
    elif fast < 1:
        text += " " + _("On the fast link it loses with the slower codec, and with the faster one it is only {said}: "
                        "there is little link time left to save.").format(said=verdicts.speedup(best_fast))
    text += " " + _("The GPU codec's speed is an assumption (a streaming pass at memory bandwidth), not a measurement; "
                    "an exact Top-K is a selection and runs slower.")
    return Verdict(_("Compression always speeds up training"),
                   {"slow": {k: v[0] for k, v in speed.items()}, "fast": {k: v[1] for k, v in speed.items()},
                    "codec s": codecs}, verdicts.tidy(text), fast < 1)


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
    text = (_("one byte holds 0..255, but the tensor has {v:,} positions; between the {v2} kept entries the largest gap is {v3:,}. Gaps in 1-byte deltas need {v4} escape bytes: {v5} bytes for {v2} indices, {v6:.1f} per index, more than int32's 4.").format(v=e['numel'], v2=e['k'], v3=e['largest gap'], v4=e['escape bytes'], v5=e['delta8 bytes'], v6=e['delta8 bytes'] / e['k']))
    return Verdict(_("A 1-byte index can address any position"), e, text, e["largest gap"] > 255)


def int4_halves_time(params: int = 25_000_000, workers: int = 8, gbit: float = 10.0, compute_s: float = 0.1,
                     numel: int = 1_000_000) -> Verdict:
    """int8 vs int4: real packet bytes, measured codec times, cost-model step times."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    rows = {}
    for b in (8, 4):
        q = Quantize(b)
        codec = codec_seconds(q, numel) * params / numel
        s = breakeven.Scheme(f"int{b}", q.compress(x).ratio, "allgather", codec)
        rows[b] = {"bytes ratio": s.ratio, "step s": s.step_time(params, compute_s, workers, cost.Link.gbit(gbit))}
    byte_gain = rows[4]["bytes ratio"] / rows[8]["bytes ratio"]
    time_gain = rows[8]["step s"] / rows[4]["step s"]
    setting = _("{params} parameters, {workers} workers, {gbit:g} Gbit/s, {compute_s:g} s compute").format(params=count(params), workers=workers, gbit=gbit, compute_s=compute_s)
    if time_gain >= 1:
        text = (_("int4 packets are {byte_gain:.2f}x smaller than int8, but a step ({setting}) is only {time_gain:.2f}x faster: compute and codec time do not shrink with the bits.").format(byte_gain=byte_gain, setting=setting, time_gain=time_gain))
    else:
        text = (_("int4 packets are {byte_gain:.2f}x smaller than int8, yet a step ({setting}) takes {v:.3g} s against {v2:.3g} s: on this machine the 4-bit codec costs more than the bytes it saves.").format(byte_gain=byte_gain, setting=setting, v=rows[4]['step s'], v2=rows[8]['step s']))
    return Verdict(_("INT4 halves the time of INT8 end to end"), {"bytes": byte_gain, "time": time_gain},
                   text, time_gain < 1.9)


def fp16_always_faster(params: int = 1_000_000, workers: int = 8, gbit: float = 100.0,
                       compute_s: float = 0.01, repeats: int = 9) -> Verdict:
    """A small model on a fast link: its all-reduce is latency-bound, so halving the bytes
    saves little, and the cast to fp16 and back can cost more than that; and fp16's range.
    The cast is timed as the fastest of `repeats` runs (the least it costs on this machine:
    a single timing on a shared CPU can be many times that)."""
    link = cost.Link.gbit(gbit)
    nbytes = cost.gradient_bytes(params)
    dense_t = cost.ring_allreduce_time(nbytes, workers, link)
    half_t = cost.ring_allreduce_time(nbytes / 2, workers, link)
    latency = 2 * (workers - 1) * link.latency
    x = torch.randn(params, generator=torch.Generator().manual_seed(0))
    cast = Cast(torch.float16)
    codec = min(time_it(lambda: cast.decompress(cast.compress(x)), repeat=repeats))
    t32, t16 = compute_s + dense_t, compute_s + codec + half_t
    gain = t32 / t16
    try:
        cast.compress(x * 1e5)
        overflow, refused = _("no overflow"), False
    except ValueError:
        overflow, refused = _("a gradient entry above 65504 cannot be sent in fp16 at all (bf16 can)"), True
    text = _("{params} parameters on {gbit:g} Gbit/s with {workers} workers: the fp32 all-reduce takes {dense:.2f} ms, "
             "{lat:.2f} ms of it latency (2(N-1)α) that halving the bytes does not touch, so fp16 saves {saved:.2f} ms "
             "of link time. Casting to fp16 and back takes at least {cast:.2f} ms here (the fastest of {n} runs): "
             "{said}. And {overflow}.").format(
        params=count(params), gbit=gbit, workers=workers, dense=1e3 * dense_t, lat=1e3 * min(latency, dense_t),
        saved=1e3 * (dense_t - half_t), cast=1e3 * codec, n=repeats, overflow=overflow,
        said=verdicts.compare_speed(_("an fp16 step"), t16, _("an fp32 step"), t32))
    return Verdict(_("fp16 all-reduce is always faster"), {"speedup": gain, "cast s": codec,
                                                          "saved s": dense_t - half_t, "latency s": latency},
                   verdicts.tidy(text), gain < 1 or refused)


def ratio_is_speedup(workers: int = 64, ratio: float = 0.01, gbit: float = 10.0, params: int = 25_000_000) -> Verdict:
    """Top-K packets cannot be summed on the wire: all-gather (N-1) M / R vs all-reduce 2(N-1)/N M."""
    x = torch.randn(1_000_000, generator=torch.Generator().manual_seed(0))
    R = TopK(ratio).compress(x).ratio
    M = cost.gradient_bytes(params)
    link = cost.Link.gbit(gbit)
    dense = cost.ring_allreduce_time(M, workers, link)
    sparse = cost.allgather_time(M / R, workers, link)
    text = (_("Top-{v:g}% packets are {R:.0f}x smaller, but with {workers} workers they must be all-gathered: communication drops from {dense:.3f} s to {sparse:.3f} s, only {v2:.1f}x.").format(v=100 * ratio, R=R, workers=workers, dense=dense, sparse=sparse, v2=dense / sparse))
    return Verdict(_("A compression ratio of R makes communication R times faster"),
                   {"R": R, "comm speedup": dense / sparse}, text, dense / sparse < R / 2)


def stochastic_more_accurate() -> Verdict:
    """Error of one stochastically rounded copy vs one rounded to nearest (2 bits)."""
    b = qx.rounding_bias(_gradient(), bits=2, draws=16)
    e = b.per_draw_error
    text = (_("one 2-bit copy of a real gradient: relative error {v:.2f} with stochastic rounding, {v2:.2f} rounding to nearest. Stochastic rounding buys unbiasedness, not accuracy.").format(v=e['stochastic'], v2=e['nearest']))
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
    text = (_("{params} parameters, {workers} workers, {gbit:g} Gbit/s: {v2:g} MB buckets give {v3:.0f} ms per step, one {v4:g} MB bucket {v5:.0f} ms: one bucket cannot start until backward ends.").format(params=count(params), workers=workers, gbit=gbit, v2=best['bucket MB'], v3=1e3 * best['step s'], v4=one['bucket MB'], v5=1e3 * one['step s']))
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
