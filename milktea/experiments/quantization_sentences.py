"""Chapter 05's conclusions, said from its measurements (through `verdicts`): what one
outlier does to int4 beside the same gradient without it, how each compressed training run
stands against dense SGD, and what 1-bit Adam saves over a whole run, warm-up included.

    >>> plain = [{"chunk": "tensor", "zeroed": 0.40, "relative error": 0.3, "bits/entry": 4.0},
    ...          {"chunk": 1024, "zeroed": 0.38, "relative error": 0.2, "bits/entry": 4.03}]
    >>> loud = [{"chunk": "tensor", "zeroed": 0.99, "relative error": 1.0, "bits/entry": 4.0},
    ...         {"chunk": 1024, "zeroed": 0.46, "relative error": 0.3, "bits/entry": 4.03}]
    >>> "ordinary rounding" in outlier_sentence(plain, loud)
    True
"""
from __future__ import annotations

from ..i18n import _
from ..tables import word
from . import verdicts


def tiny_updates_sentence(sums: dict) -> str:
    """`tiny_updates` in words: the true total, what rounding to nearest delivered, the range of
    the single stochastic runs, and whether their mean lies within two standard errors of the
    truth (unbiased, as far as these runs can tell) or outside them."""
    import numpy as np
    final = np.asarray(sums["runs"])[:, -1]
    n, true, mean = len(final), sums["true"][-1], float(final.mean())
    se = float(final.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    text = _("After {steps} steps the true total is {true:.3f}; rounding to nearest delivered {near:.3f}. "
             "Stochastic rounding, {n} independent runs: a single run delivered between {lo:.3f} and {hi:.3f}, "
             "their mean {mean:.3f}").format(steps=len(sums["true"]), true=true, near=sums["nearest"][-1], n=n,
                                               lo=final.min(), hi=final.max(), mean=mean)
    if not np.isfinite(se):
        return verdicts.tidy(text + ".")
    if abs(mean - true) <= 2 * se:
        text += _(", within two standard errors (±{se:.3f}) of the truth: right on average, while any one run "
                  "is off by chance.").format(se=2 * se)
    else:
        text += _(", outside two standard errors (±{se:.3f}) of the truth: these runs do not look unbiased.").format(
            se=2 * se)
    return verdicts.tidy(text)


def _row(rows: list[dict], chunk) -> dict:
    return next(r for r in rows if r["chunk"] == chunk)


def outlier_sentence(plain: list[dict], loud: list[dict], chunk: int = 1024) -> str:
    """int4 with one outlier (`loud`, chunk_sweep rows) against the same gradient without it
    (`plain`): the share of entries zeroed with one scale per tensor and per `chunk`, each
    beside its no-outlier baseline, so the outlier's own part can be read off."""
    t, c = _row(loud, "tensor"), _row(loud, chunk)
    t0, c0 = _row(plain, "tensor"), _row(plain, chunk)
    text = _("int4 with one outlier: one scale for the whole tensor turns **{z:.0%}** of the other entries into 0 "
             "(relative error {e:.2f}), against {z0:.0%} for the same gradient without the outlier. One scale per "
             "{chunk} entries turns {zc:.0%} into 0 (error {ec:.2f}), against {zc0:.0%} without the outlier, for "
             "{bits:.3f} more bits per entry.").format(
        z=t["zeroed"], e=t["relative error"], z0=t0["zeroed"], chunk=chunk, zc=c["zeroed"], ec=c["relative error"],
        zc0=c0["zeroed"], bits=c["bits/entry"] - t["bits/entry"])
    if c0["zeroed"] >= c["zeroed"] / 2:
        text += " " + _("So most of the zeros left with per-chunk scales are int4's ordinary rounding of small "
                        "entries; the outlier adds {d:+.0f} points to them.").format(d=100 * (c["zeroed"] - c0["zeroed"]))
    else:
        text += " " + _("So even with per-chunk scales most of the zeros are the outlier's doing ({d:+.0f} points).").format(
            d=100 * (c["zeroed"] - c0["zeroed"]))
    small = min((r for r in plain if r["chunk"] != "tensor"), key=lambda r: r["chunk"])
    text += " " + _("Without an outlier, the relative error goes from {a:.2f} with one scale for the tensor to "
                    "{b:.2f} with chunks of {n}.").format(a=t0["relative error"], b=small["relative error"],
                                                          n=small["chunk"])
    return verdicts.tidy(text)


def training_sentence(histories: list, noise_points: float = 1.0) -> str:
    """Chapter 05's training runs (histories[0] dense SGD, [1] sign without the ledger, [2] sign
    with it, the rest other schemes): each run's final accuracy against dense, ahead or behind
    in points (level within `noise_points`), at its bytes ratio, and what the ledger did for sign."""
    dense, sign, sign_ef = histories[0], histories[1], histories[2]
    acc = lambda h: h.final("accuracy")   # noqa: E731
    noise = noise_points / 100
    text = _("After {steps} steps dense SGD reaches {a:.1%}.").format(steps=dense.config["steps"], a=acc(dense))
    for h in histories[1:]:
        text += " " + _("{scheme}: {acc:.1%}, {gap}, sending {r:.0f}x fewer bytes.").format(
            scheme=word(h.scheme), acc=acc(h), gap=verdicts.gap(acc(h), acc(dense), _("dense"), noise), r=h.ratio)
    text += " " + _("For sign, the ledger {effect}.").format(effect=verdicts.effect(acc(sign_ef), acc(sign), noise))
    text += " " + _("Plotted against bytes (right), each curve shows how much traffic a scheme needed to reach each "
                    "accuracy. This is one seed and 100 steps on a small task: gaps within ±{n:g} (accuracy points) are "
                    "read as level, and a gap of a point or two more deserves a run with other seeds before you trust "
                    "it.").format(
        n=noise_points)
    return verdicts.tidy(text)


def onebit_verdict(rows: list[dict], steps: int) -> str:
    """1-bit Adam's rows (dense Adam, the longer warm-up, the one-step warm-up): bytes per step
    after the warm-up, the ratio over the whole run with the warm-up's dense steps counted,
    accuracy against dense Adam, and what freezing the variance after one step did."""
    adam, warm, early = rows
    share = warm["warmup"] / steps
    text = _("After its warm-up of {w} steps ({share:.0%} of the run), 1-bit Adam sends **{b:.0f} bytes per step** "
             "per worker instead of {d:.0f}: R = {r:.0f} for those steps. Over the whole run, the warm-up's dense "
             "steps included, it sent **{rr:.1f}x** fewer bytes: that is the saving to quote (the paper's \"up to "
             "5x\" counts the warm-up too).").format(
        w=warm["warmup"], share=share, b=warm["bytes_per_step"], d=adam["bytes_per_step"], r=warm["R"],
        rr=warm["R whole run"])
    text += " " + _("It ends at {a:.1%} held-out accuracy, {gap}.").format(
        a=warm["accuracy"], gap=verdicts.gap(warm["accuracy"], adam["accuracy"], _("Adam on a dense all-reduce"), 0.01))
    if early["diverged_at"] is not None:
        text += " " + _("Frozen after one step, the variance ruined the run: the loss blew up at step {s}.").format(
            s=early["diverged_at"])
    else:
        text += " " + _("Frozen after one step, the variance still trained, to {a:.1%}: try a larger lr to see it "
                        "fail.").format(a=early["accuracy"])
    return verdicts.tidy(text)
