"""Figures for chapter 02: what a summary costs on the wire and what it keeps."""
from __future__ import annotations

import numpy as np

from ..experiments.compression import Measurement
from .bottleneck import _ax
from ..tables import word
from ..i18n import _

FAMILY_STYLE = {"Top-K": ("o-", "tab:blue"), "Random-K": ("v--", "tab:gray"),
                "quantize": ("s-", "tab:green"), "Top-K + int8": ("D-", "tab:purple")}


def tradeoff_plot(curves: dict[str, list[Measurement]], ax=None, highlight: Measurement | None = None):
    """R (log) against the relative error ||g - C(g)|| / ||g||, one curve per family."""
    ax = _ax(ax, (6, 4))
    for name, ms in curves.items():
        style, color = FAMILY_STYLE.get(name, ("o-", None))
        ax.plot([m.ratio for m in ms], [m.rel_error for m in ms], style, color=color, label=word(name), ms=5)
        if name == "quantize":
            for m in ms:
                # above the point: below it, a label near zero error (int8) falls off the axes
                ax.annotate(word(m.name), (m.ratio, m.rel_error), textcoords="offset points", xytext=(3, 5), fontsize=7,
                            annotation_clip=False)
    if highlight is not None:
        ax.plot([highlight.ratio], [highlight.rel_error], "*", color="tab:red", ms=16,
                label=_("now: {name}").format(name=word(highlight.name)), zorder=5)
    ax.set_xscale("log")
    ax.set_xlabel(_("compression ratio R = original bytes / wire bytes"))
    ax.set_ylabel(_("relative error ||g - C(g)|| / ||g||"))
    ax.set_ylim(-0.03, 1.08)
    ax.axhline(1.0, ls=":", color="gray", lw=1)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(_("more compression, less of the gradient arrives"), fontsize=10)
    return ax


def ratio_bars(lossless: dict[str, float], lossy: list[Measurement], ax=None):
    """Compression ratios side by side: general-purpose lossless codecs vs lossy schemes."""
    ax = _ax(ax, (7, 3.2))
    names = [_("{name} (lossless)").format(name=k) for k in lossless] + [word(m.name) for m in lossy]
    vals = list(lossless.values()) + [m.ratio for m in lossy]
    colors = ["tab:gray"] * len(lossless) + ["tab:blue"] * len(lossy)
    bars = ax.bar(range(len(vals)), vals, color=colors)
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v * 1.1, word(f"{v:.3g}x"), ha="center", fontsize=8)
    ax.set_xticks(range(len(vals)), names, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(0.8, max(vals) * 4)
    ax.set_ylabel(_("R (log scale)"))
    ax.set_title(_("zip barely shrinks a gradient; a lossy summary does"), fontsize=10)
    return ax


def exchange_plot(d: dict, ratio: float, ax=None):
    """Seconds per exchange vs workers: dense all-reduce, compressed all-gather, dense / R."""
    ax = _ax(ax, (5.5, 3.6))
    ax.plot(d["workers"], d["dense all-reduce"], "o-", color="tab:orange", label=_("dense, ring all-reduce"))
    ax.plot(d["workers"], d["compressed all-gather"], "s-", color="tab:blue",
            label=_("R={ratio:g} packets, all-gather").format(ratio=ratio))
    ax.plot(d["workers"], d["dense / R"], ":", color="gray", label=_("dense / R (the hope)"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(d["workers"], [str(n) for n in d["workers"]])
    ax.set_yscale("log")
    ax.set_xlabel(_("workers N"))
    ax.set_ylabel(_("seconds per exchange"))
    ax.legend(fontsize=8)
    ax.set_title(_("sparse packets are gathered, not summed"), fontsize=10)
    return ax


def received_plot(original: np.ndarray, received: np.ndarray, ax=None, title: str = ""):
    """Every entry: its value in the gradient (x) against what arrives (y). On the diagonal:
    sent exactly; on the x axis: dropped; on flat steps: rounded to a few levels."""
    ax = _ax(ax, (4.5, 4))
    lim = float(np.abs(original).max()) * 1.05
    ax.plot([-lim, lim], [-lim, lim], ":", color="gray", lw=1, label=_("sent exactly"))
    ax.plot(original, received, ".", ms=2.5, color="tab:blue", alpha=0.5)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim * 1.6, lim * 1.6)
    ax.set_xlabel(_("entry of the gradient"))
    ax.set_ylabel(_("what arrives"))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    return ax
