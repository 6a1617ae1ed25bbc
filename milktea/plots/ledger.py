"""Figures for chapter 04: the ledger night by night, and training with and without it."""
from __future__ import annotations

import numpy as np

from ..experiments.ledger import LedgerTrace
from .bottleneck import _ax
from ..tables import word
from ..i18n import _


def ef21_curves(case, ax=None):
    """`ef21_case`: the distance to the optimum per step, each run's median over the seeds
    with the band from the lowest to the highest seed."""
    from ..experiments.ledger import EF21_RUNS
    ax = _ax(ax, (6.4, 3.8))
    for run, style, color in zip(EF21_RUNS, (":", "-", "-"), ("black", "tab:gray", "tab:red")):
        e = case.errors[run]
        ax.plot(case.steps_at, np.median(e, axis=0), linestyle=style, color=color, label=_(run))
        ax.fill_between(case.steps_at, e.min(axis=0), e.max(axis=0), color=color, alpha=0.2, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("distance to the optimum"))
    ax.legend(fontsize=8)
    ax.set_title(_("{workers} workers with different data, Top-{k} of {d}: lines are the median of {n} "
                   "seeds, bands their range").format(workers=case.workers, k=case.k, d=case.n_params,
                                                      n=len(case.seeds)), fontsize=9)
    return ax


def ledger_night(trace: LedgerTrace, t: int, axes, item: str = "ice"):
    """Left: night t's list to choose from (ledger + new), the chosen items in colour and
    the ledger carried over; right: running totals of `item` heard by head office, with
    and without the ledger, against the truth."""
    ax0, ax1 = axes
    night = trace.night(t)
    x = np.arange(len(trace.items))
    total = night["to choose from"]
    chosen = night["read out"] != 0
    ax0.bar(x - 0.27, night["ledger before"], width=0.27, color="wheat", label=_("in the ledger"))
    ax0.bar(x, night["new"], width=0.27, color="lightgray", label=_("new tonight"))
    ax0.bar(x + 0.27, total, width=0.27, color=np.where(chosen, "tab:red", "white"), edgecolor="black",
            lw=0.6, label=_("sum (red: read out)"))
    ax0.axhline(0, color="black", lw=0.5)
    ax0.set_xticks(x, [_(i) for i in trace.items])
    lim = np.abs(np.concatenate([trace.before + trace.grads, trace.grads])).max() * 1.15
    ax0.set_ylim(-lim, lim)
    ax0.legend(fontsize=7, loc="lower left", ncol=3)
    ax0.set_title(_("night {v}: read out the {k} largest sums").format(v=t + 1, k=trace.k), fontsize=10)
    nights = np.arange(1, t + 2)
    ax1.plot(nights, trace.truth(item)[:t + 1], "k-", label=_("the truth"))
    ax1.plot(nights, trace.delivered(item)[:t + 1], "o-", color="tab:blue", label=_("heard, with ledger"))
    ax1.plot(nights, trace.delivered(item, ledger=False)[:t + 1], "s--", color="tab:gray",
             label=_("heard, no ledger"))
    ax1.set_xlim(0.5, trace.nights + 0.5)
    lo = min(0, trace.truth(item).min(), trace.delivered(item).min()) * 1.1
    ax1.set_ylim(lo, max(trace.truth(item).max(), trace.delivered(item).max()) * 1.1 + 1e-9)
    ax1.set_xlabel(_("night"))
    ax1.set_title(_("running total for '{item}'").format(item=_(item)), fontsize=10)
    ax1.legend(fontsize=8, loc="upper left")
    return axes


def story_curves(demo, ax=None):
    """The story's demo: distance to the optimum ||w - w*|| per step for dense SGD, Top-K
    with the ledger and Top-K without it."""
    ax = _ax(ax, (6, 3.8))
    for h, label, style in ((demo.dense, "dense", "k-"), (demo.topk_ef, "Top-K + ledger", "-"),
                            (demo.topk, "Top-K, no ledger", "--")):
        err = np.sqrt(2 * np.asarray(h.loss))
        ax.plot(np.arange(len(err)), err, style, label=word(label))
    ax.set_yscale("log")
    ax.set_xlabel(_("step"))
    ax.set_ylabel("||w - w*||")
    ax.legend(fontsize=8)
    ax.set_title(_("the shop's toy: 1000 parameters, keep 100 a step"), fontsize=10)
    return ax


def feedback_runs(runs: dict, axes=None):
    """Held-out accuracy and training loss against steps for each run."""
    if axes is None:
        import matplotlib.pyplot as plt
        _fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax0, ax1 = axes
    styles = {"dense": "k-", "Top-K + ledger": "-", "Top-K, no ledger": "--"}
    for name, h in runs.items():
        ax0.plot(h.eval_steps, h.evals["accuracy"], styles.get(name, "-"), label=word(name))
        ax1.plot(np.arange(1, h.steps + 1), h.loss, styles.get(name, "-"), label=word(name), lw=0.8)
    ax0.set_xlabel(_("step"))
    ax0.set_ylabel(_("held-out accuracy"))
    ax0.legend(fontsize=8)
    ax1.set_yscale("log")
    ax1.set_xlabel(_("step"))
    ax1.set_ylabel(_("training loss (minibatch)"))
    h = next(iter(runs.values()))
    ax0.set_title(_("digits, {workers} simulated workers").format(workers=h.workers), fontsize=10)
    return axes


def dgc_ablation(runs: dict, ax=None):
    """DGC's ablation (`experiments.dgc.ablation`): each variant's validation loss, one dot
    per seed and a bar at their mean, so the spread across seeds is in view."""
    import math
    ax = _ax(ax, (8, 0.45 * len(runs) + 1.4))
    for i, (name, hs) in enumerate(runs.items()):
        losses = [h.final("loss") for h in hs if h.diverged_at is None and math.isfinite(h.final("loss"))]
        if losses:
            ax.barh(i, sum(losses) / len(losses), color="tab:blue" if name.startswith("DGC") else "tab:gray",
                    alpha=0.35)
            ax.plot(losses, [i] * len(losses), "k.", ms=6)
    ax.set_yticks(range(len(runs)), [_(name) for name in runs])
    ax.invert_yaxis()
    finite = [h.final("loss") for hs in runs.values() for h in hs if math.isfinite(h.final("loss"))]
    if finite:
        lo, hi = min(finite), max(finite)
        ax.set_xlim(lo - 0.3 * (hi - lo + 1e-3), hi + 0.3 * (hi - lo + 1e-3))
    ax.set_xlabel(_("validation loss after the run (dots: seeds; bar: their mean)"))
    return ax
