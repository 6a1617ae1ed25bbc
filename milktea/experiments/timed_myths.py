"""The misconceptions of chapter 07 that rest on a timing: compression always pays, INT4
halves INT8's time, fp16 all-reduce is always faster. Each times its codecs here (warmed up,
then in turns, repeated: `milktea.timing.codec_times`), prices the rest with the cost model,
and is decided by a function of numbers (`int4_verdict`, `fp16_verdict`) that says the
timed difference against the runs' spread, prices a GPU's codec as an assumption beside the
CPU's, and treats an impossible outcome (a step that shrinks more than its bytes) as a
disturbed timing, not a result. Tests feed those functions numbers, never timings.

    >>> int4_verdict({8: 4.0, 4: 7.96}, {8: [0.01] * 3, 4: [0.01] * 3}, 25_000_000, 8, 10.0, 0.1).busted
    True
"""
from __future__ import annotations

import torch

from .. import cost
from ..compressors import Cast, Quantize, TopK
from ..i18n import _, count
from ..timing import codec_times, median
from . import breakeven, verdicts
from .bottleneck import seconds
from .myth import Verdict


def compression_always_pays(params: int = 25_000_000, workers: int = 8, compute_s: float = 0.1,
                            fast_gbit: float = 100.0, slow_gbit: float = 0.1, numel: int = 1_000_000,
                            gpu_gbps: float = 2000.0, repeats: int = 7) -> Verdict:
    """Top-1% + int8 on a fast and a slow link, priced twice: with this machine's measured
    codec time (warm, the median of `repeats` runs, its spread the noise) and with a
    data-centre GPU's memory-bound codec (`advice.memory_bound_codecs`, an assumption), so
    that the verdict does not rest on a CPU codec alone."""
    from ..advice import memory_bound_codecs
    from ..compressors import Chain
    comp = Chain(TopK(0.01), Quantize(8))
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    ratio = comp.compress(x).ratio
    samples = [t * params / numel for t in codec_times({"codec": comp}, numel, repeats)["codec"]]
    here, gpu = _("this machine"), _("a GPU assumed to run it at {gbps:g} GB/s of memory bandwidth").format(gbps=gpu_gbps)
    codecs = {here: samples, gpu: [memory_bound_codecs(gpu_gbps)["topk1%+int8+EF"] * 1e-9 * params]}
    return pays_verdict(ratio, codecs, params, workers, compute_s, fast_gbit, slow_gbit)


def pays_verdict(ratio: float, codecs: dict, params: int, workers: int, compute_s: float, fast_gbit: float,
                 slow_gbit: float) -> Verdict:
    """The "compression always pays" myth from numbers: a Top-1%+int8 packet `ratio` times
    smaller, all-gathered, with each codec of `codecs` ({where: [seconds per step, one per
    timed run]}; a single value for a modelled one) on a slow and a fast link. Each speed is
    said against its codec's spread (at least 2%); the claim is busted where any codec shows
    no measurable speed-up on the fast link.

    >>> pays_verdict(80.0, {"a": [0.5] * 3}, 25_000_000, 8, 0.1, 100.0, 0.1).busted    # a slow codec
    True
    >>> pays_verdict(80.0, {"a": [1e-4] * 3}, 25_000_000, 8, 0.1, 1.0, 0.1).busted     # 1 Gbit/s is slow
    False
    """
    def speedups(codec_s):
        s = breakeven.Scheme("top1%+int8", ratio, "allgather", codec_s)
        return breakeven.speedup_vs_bandwidth([s], params, compute_s, workers, [slow_gbit, fast_gbit])["top1%+int8"]
    speed, noise = {}, {}
    for where, ts in codecs.items():
        runs = [speedups(t) for t in ts]
        speed[where] = [median(r[i] for r in runs) for i in (0, 1)]
        noise[where] = verdicts.noise_of([r[1] for r in runs], floor=0.02)
    said = {w: (verdicts.speedup(sp[0], noise[w]), verdicts.speedup(sp[1], noise[w])) for w, sp in speed.items()}
    text = _("{params} parameters, {workers} workers, {compute_s:g} s of compute. Top-1%+int8 against dense: ").format(
        params=count(params), workers=workers, compute_s=compute_s)
    text += _("; ").join(_("with the codec of {where} ({codec} per step), {slow} on {slow_gbit:g} Gbit/s and {fast} on "
                           "{fast_gbit:g} Gbit/s").format(where=where, codec=seconds(median(codecs[where])),
                                                        slow=said[where][0], slow_gbit=slow_gbit,
                                                        fast=said[where][1], fast_gbit=fast_gbit)
                         for where in speed) + _(".")
    kinds = [said[w][1].kind for w in speed]
    best = max(speed, key=lambda w: speed[w][1])
    if all(k == "slower" for k in kinds):
        text += " " + _("On the fast link it loses with either codec: there is little link time left to save.")
    elif "slower" in kinds:
        text += " " + _("On the fast link it loses with the slower codec, and with the faster one it is only {said}: "
                        "there is little link time left to save.").format(said=said[best][1])
    elif all(k == "faster" for k in kinds):
        text += " " + _("Here it pays on both links with either codec.")
    else:
        text += " " + _("On the fast link the difference is within the noise: there is little link time left to save.")
    if len(codecs) > 1:
        text += " " + _("The GPU codec's speed is an assumption (a streaming pass at memory bandwidth), not a "
                        "measurement; an exact Top-K is a selection and runs slower.")
    busted = any(k != "faster" for k in kinds)     # no measurable speed-up is no speed-up either
    return Verdict(_("Compression always speeds up training"),
                   {"slow": {k: v[0] for k, v in speed.items()}, "fast": {k: v[1] for k, v in speed.items()},
                    "codec s": {k: median(v) for k, v in codecs.items()}, "noise": noise}, verdicts.tidy(text), busted)


def int4_halves_time(params: int = 25_000_000, workers: int = 8, gbit: float = 10.0, compute_s: float = 0.1,
                     numel: int = 1_000_000, repeats: int = 9) -> Verdict:
    """int8 vs int4: real packet bytes, codec times measured here (both warmed up, then timed
    in turns, `repeats` each), cost-model step times; decided by `int4_verdict`."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    qs = {8: Quantize(8), 4: Quantize(4)}
    ratios = {b: q.compress(x).ratio for b, q in qs.items()}
    times = codec_times(qs, numel, repeats)
    return int4_verdict(ratios, {b: [t * params / numel for t in ts] for b, ts in times.items()},
                        params, workers, gbit, compute_s)


def int4_verdict(ratios: dict, codec_s: dict, params: int, workers: int, gbit: float, compute_s: float) -> Verdict:
    """The INT4 myth from numbers: `ratios` {8: R, 4: R} (fp32 bytes / packet bytes),
    `codec_s` {8: [seconds per step, one per timed run], 4: [...]}. Compute does not shrink
    with the bits, so a step can shrink less than its bytes: the gain with free codecs
    bounds it, and decides the claim whatever the timings say. The measured gain is said
    against the runs' spread; one above the bytes' gain (only a codec difference can make
    it, and two one-pass quantizers do not differ so much) is said to be a disturbed timing.

    >>> v = int4_verdict({8: 4.0, 4: 7.96}, {8: [0.30] * 5, 4: [0.004] * 5}, 25_000_000, 8, 10.0, 0.1)
    >>> v.busted, v.numbers["time"] > v.numbers["bytes"]     # the cold int8 codec: an impossible gain
    (True, True)
    """
    link = cost.Link.gbit(gbit)

    def step(b, codec):
        return breakeven.Scheme(f"int{b}", ratios[b], "allgather", codec).step_time(params, compute_s, workers, link)
    byte_gain = ratios[4] / ratios[8]
    free_gain = step(8, 0.0) / step(4, 0.0)
    s8, s4 = [step(8, c) for c in codec_s[8]], [step(4, c) for c in codec_s[4]]
    time_gain = median(s8) / median(s4)
    noise = max(verdicts.noise_of(s8, 0.02), verdicts.noise_of(s4, 0.02))
    setting = _("{params} parameters, {workers} workers, {gbit:g} Gbit/s, {compute_s:g} s compute").format(
        params=count(params), workers=workers, gbit=gbit, compute_s=compute_s)
    text = _("int4 packets are {byte_gain:.2f}x smaller than int8. A step ({setting}) cannot shrink as much: compute "
             "does not shrink with the bits, so even with free codecs it would be {free}.").format(
        byte_gain=byte_gain, setting=setting, free=verdicts.speedup(free_gain))
    codecs = _("int8 {c8:.1f} ms, int4 {c4:.1f} ms per step, each the median of {n} warm runs taken in turns").format(
        c8=1e3 * median(codec_s[8]), c4=1e3 * median(codec_s[4]), n=min(len(codec_s[8]), len(codec_s[4])))
    plausible = time_gain <= byte_gain * (1 + noise)
    if plausible:
        text += " " + _("With the codecs timed here ({codecs}), {said}.").format(
            codecs=codecs, said=verdicts.compare_speed(_("an int4 step"), median(s4), _("an int8 step"), median(s8),
                                                       noise))
    else:
        text += " " + _("The codecs timed here ({codecs}) would make it {gain:.2f}x faster, more than the bytes shrink: "
                        "only a codec difference can do that, and two one-pass quantizers of the same tensor do not "
                        "differ so much. The timing was disturbed (a busy machine, or a codec timed cold): run the cell "
                        "again.").format(codecs=codecs, gain=time_gain)
    if free_gain < 2:
        busted = True
    elif plausible and time_gain * (1 + noise) < 2:
        busted = True
    elif plausible and time_gain * (1 - noise) >= 2:
        busted = False
    else:
        busted = None
    return Verdict(_("INT4 halves the time of INT8 end to end"),
                   {"bytes": byte_gain, "time": time_gain, "time with free codecs": free_gain, "noise": noise,
                    "plausible": plausible}, verdicts.tidy(text), busted)


def fp16_always_faster(params: int = 1_000_000, workers: int = 8, gbit: float = 100.0,
                       compute_s: float = 0.01, repeats: int = 9, gpu_gbps: float = 2000.0) -> Verdict:
    """A small model on a fast link: its all-reduce is latency-bound, so halving the bytes
    saves little, and the cast to fp16 and back can cost more than that; and fp16's range.
    The cast is timed here (warm, `repeats` runs); decided by `fp16_verdict`."""
    x = torch.randn(params, generator=torch.Generator().manual_seed(0))
    cast = Cast(torch.float16)
    times = codec_times({"fp16": cast}, params, repeats)["fp16"]
    try:
        cast.compress(x * 1e5)
        refused = False
    except ValueError:
        refused = True
    return fp16_verdict(params, workers, gbit, compute_s, times, refused, gpu_gbps)


#: bytes a cast to 16 bits and back moves per parameter: read 4, write 2; read 2, write 4
CAST_BYTES = 12


def fp16_verdict(params: int, workers: int, gbit: float, compute_s: float, cast_s, refused: bool,
                 gpu_gbps: float = 2000.0) -> Verdict:
    """The fp16 myth from numbers: `cast_s`, seconds of each timed cast to fp16 and back on
    this machine; `refused`, whether fp16 refused a gradient beyond its range. The speed is
    said twice, each against the noise (the casts' spread, at least 2%: the compute time is an
    assumed figure): with this CPU's cast, and with a GPU's that streams CAST_BYTES per
    parameter at `gpu_gbps` GB/s (an assumption, said as one).

    >>> fp16_verdict(1_000_000, 8, 100.0, 0.01, [1e-3] * 5, refused=False).busted   # CPU cast: slower
    True
    >>> fp16_verdict(1_000_000, 8, 100.0, 0.01, [1e-6] * 5, refused=False).busted   # faster everywhere
    False
    """
    link = cost.Link.gbit(gbit)
    nbytes = cost.gradient_bytes(params)
    dense_t = cost.ring_allreduce_time(nbytes, workers, link)
    half_t = cost.ring_allreduce_time(nbytes / 2, workers, link)
    latency = 2 * (workers - 1) * link.latency
    t32 = compute_s + dense_t
    t16 = [compute_s + c + half_t for c in cast_s]
    noise = verdicts.noise_of(t16, 0.02)
    gpu_cast = CAST_BYTES * params / (gpu_gbps * 1e9)
    fp16, fp32 = _("an fp16 step"), _("an fp32 step")
    cpu = verdicts.compare_speed(fp16, median(t16), fp32, t32, noise)
    gpu = verdicts.compare_speed(fp16, compute_s + gpu_cast + half_t, fp32, t32, 0.02)
    text = _("{params} parameters on {gbit:g} Gbit/s with {workers} workers, {compute:g} ms of compute (an assumed "
             "figure): the fp32 all-reduce takes {dense:.2f} ms, {lat:.2f} ms of it latency (2(N-1)α) that halving the "
             "bytes does not touch, so fp16 saves {saved:.2f} ms of link time.").format(
        params=count(params), gbit=gbit, workers=workers, compute=1e3 * compute_s, dense=1e3 * dense_t,
        lat=1e3 * min(latency, dense_t), saved=1e3 * (dense_t - half_t))
    text += " " + _("Casting to fp16 and back takes {cast:.2f} ms on this CPU (the median of {n} warm runs): {cpu}. "
                    "A GPU that streamed the cast's {b} bytes per parameter at an assumed {gbps:g} GB/s would take "
                    "{gcast:.3f} ms: {gpu}.").format(cast=1e3 * median(cast_s), n=len(cast_s), cpu=cpu, b=CAST_BYTES,
                                                     gbps=gpu_gbps, gcast=1e3 * gpu_cast, gpu=gpu)
    if refused:
        text += " " + _("Either way, what busts the claim for good is fp16's range: a gradient entry above 65504 "
                        "cannot be sent in fp16 at all (bf16 can).")
    busted = refused or "slower" in (cpu.kind, gpu.kind)
    if not busted and "same" in (cpu.kind, gpu.kind):
        busted = None
    return Verdict(_("fp16 all-reduce is always faster"),
                   {"speedup": t32 / median(t16), "gpu speedup": t32 / (compute_s + gpu_cast + half_t),
                    "cast s": median(cast_s), "saved s": dense_t - half_t, "latency s": latency, "noise": noise,
                    "refused": refused}, verdicts.tidy(text), busted)
