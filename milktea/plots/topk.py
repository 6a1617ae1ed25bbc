"""Figures for chapter 03: selection speed, index cost, and the share of the norm."""
from __future__ import annotations

import numpy as np

from ..experiments.topk import SelectionTiming, TopKView
from .bottleneck import _ax
from ..i18n import _
from ..tables import word

ENCODING_STYLE = {"int32": ("o-", "tab:red"), "delta8": ("s-", "tab:blue"), "varint": ("^-", "tab:green"),
                  "bitmap": ("D-", "tab:purple")}


def selection_plot(t: SelectionTiming, ax=None):
    """Median seconds of each selector against the tensor size (log-log)."""
    ax = _ax(ax, (6, 4))
    for name, times in t.times.items():
        ax.plot(t.sizes[:len(times)], times, "o-", label=word(name))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("entries n"))
    ax.set_ylabel(_("seconds (median)"))
    ax.legend(fontsize=8)
    where = (_("CPU, {n} thread(s)").format(n=t.threads) if t.device == "cpu" else t.device.upper())
    ax.set_title(_("find the top {density:.0%} ({where})").format(density=t.density, where=where), fontsize=10)
    return ax


def index_cost_plot(rows: list[dict], ax=None):
    """Bytes of the index per kept entry as the density K/N varies, for each encoding,
    against the 4 bytes of the value itself."""
    ax = _ax(ax, (6, 4))
    s = np.array([r["density"] for r in rows])
    k = np.array([r["k"] for r in rows])
    for enc, (style, color) in ENCODING_STYLE.items():
        ax.plot(s, np.array([r[f"{enc} bytes"] for r in rows]) / k, style, color=color, label=enc)
    ax.axhline(4, ls=":", color="black", lw=1)
    ax.text(s[0], 4.4, _("the value itself: 4 bytes"), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("density s = K / N"))
    ax.set_ylabel(_("index bytes per kept entry"))
    ax.legend(fontsize=8)
    ax.set_title(_("saying *where* costs bytes too"), fontsize=10)
    return ax


def norm_share_plot(curves: dict[str, tuple[np.ndarray, np.ndarray]], ax=None, mark: float | None = None):
    """Share of ||g||^2 carried by the largest fraction s of entries; the diagonal is
    what Random-K keeps on average."""
    ax = _ax(ax, (5.5, 4))
    for name, (s, share) in curves.items():
        ax.plot(s, share, label=word(name))
        if mark is not None:
            i = min(np.searchsorted(s, mark), len(s) - 1)
            ax.plot([s[i]], [share[i]], "o", color=ax.lines[-1].get_color())
    grid = np.logspace(np.log10(min(c[0][0] for c in curves.values())), 0, 50)
    ax.plot(grid, grid, ":", color="gray", label=_("Random-K (on average)"))
    if mark is not None:
        ax.axvline(mark, color="tab:red", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(_("share of entries kept, s = K / N"))
    ax.set_ylabel(_("share of ||g||^2 they carry"))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(_("a few large entries carry much of the gradient"), fontsize=10)
    return ax


def layer_kept(grad: np.ndarray, view: TopKView, axes):
    """Left: |g| of a weight matrix with the kept entries marked; right: histogram of |g|
    with the threshold."""
    a = np.abs(np.asarray(grad, dtype=float))
    ax0, ax1 = axes
    ax0.imshow(a, cmap="Greys", aspect="auto", interpolation="nearest")
    r, c = np.nonzero(view.kept)
    ax0.scatter(c, r, s=6, color="tab:red", marker="s", linewidths=0)
    ax0.set_xlabel(_("input pixel"))
    ax0.set_ylabel(_("hidden unit"))
    ax0.set_title(_("kept: {k} of {numel} (red)").format(k=view.k, numel=view.numel), fontsize=9)
    nz = a[a > 0]
    bins = np.logspace(np.log10(nz.min()), np.log10(nz.max()), 40) if nz.size else 20
    ax1.hist(nz, bins=bins, color="lightgray")
    ax1.axvline(view.threshold, color="tab:red", label=_("threshold {threshold:.2g}").format(threshold=view.threshold))
    ax1.set_xscale("log")
    ax1.set_xlabel("|g|")
    ax1.set_ylabel(_("entries"))
    ax1.legend(fontsize=8)
    ax1.set_title(_("{energy:.0%} of ||g||^2 kept").format(energy=view.energy), fontsize=9)
    return axes


def averaged_error_plot(d: dict, ax=None):
    """Relative error of the average of many compressed copies: unbiased Random-K
    averages its error away, Top-K keeps dropping the same entries."""
    ax = _ax(ax, (5.5, 3.6))
    ax.plot(d["draws"], d["Random-K (scaled)"], "o-", color="tab:gray", label=_("Random-K, scaled by N/K"))
    ax.plot(d["draws"], d["Top-K"], "s-", color="tab:blue", label="Top-K")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("copies averaged"))
    ax.set_ylabel(_("relative error of the average"))
    ax.legend(fontsize=8)
    ax.set_title(_("unbiased but noisy vs biased but steady"), fontsize=10)
    return ax
