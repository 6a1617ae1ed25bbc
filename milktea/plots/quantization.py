"""Figures of the quantization chapter. Each takes what milktea.experiments.quantization
returns and draws it; pass `ax`/`fig` to draw into your own, else a new figure is made."""
from __future__ import annotations

import math

import numpy as np
from ..tables import word
from ..i18n import N_, _
from .training import metric_name

PARTS = (N_("header"), N_("indices"), N_("values"))   # where a sparse packet's bytes go


def _fig(fig, figsize, ncols=1, nrows=1, **kw):
    if fig is None:
        import matplotlib.pyplot as plt
        fig = plt.figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes.ravel()


def _ax(ax, figsize):
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=figsize)
    return ax


def half_step(rows, fig=None):
    """Histogram of |error| / (step / 2) per bit width: everything must sit left of 1."""
    fig, axes = _fig(fig, (3.2 * len(rows), 2.8), ncols=len(rows), sharey=True)
    for ax, r in zip(axes, rows):
        ax.hist(r.errors.numpy(), bins=40, range=(0, 1.1), color="tab:blue", alpha=0.8)
        ax.axvline(1.0, color="tab:red", ls="--", label=_("bound: half a step"))
        ax.set_title(_("int{bits}: worst {worst:.4f}").format(bits=r.bits, worst=r.worst))
        ax.set_xlabel(_("|error| / (step / 2)"))
    axes[0].set_ylabel(_("entries"))
    axes[0].legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    return fig


def bit_widths(rows, ax=None):
    """Bits per entry (wire bytes, scales and header included) against relative error."""
    ax = _ax(ax, (5.5, 3.5))
    bits = [r.bits_per_entry for r in rows]
    errs = [r.rel_error for r in rows]
    ax.plot(bits, errs, "o-", color="tab:blue")
    for r in rows:
        ax.annotate(_("{name} (R={ratio})").format(name=word(r.name), ratio=word(f"{r.ratio:.1f}x")),
                    (r.bits_per_entry, r.rel_error), fontsize=8,
                    textcoords="offset points", xytext=(6, -12))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_("bits per entry on the wire"))
    ax.set_ylabel(_("||decoded - g|| / ||g||"))
    ax.set_title(_("fewer bits, larger error"))
    ax.margins(x=0.15, y=0.3)
    return ax


def chunk_sweep(curves: dict, ax=None):
    """Relative error against bits per entry as chunks shrink; one curve per label."""
    ax = _ax(ax, (5.5, 3.5))
    for label, rows in curves.items():
        xs = [r["bits/entry"] for r in rows]
        ys = [r["relative error"] for r in rows]
        line, = ax.plot(xs, ys, "o-", label=word(label))
        for r in rows:
            ax.annotate(word(str(r["chunk"])), (r["bits/entry"], r["relative error"]), fontsize=7,
                        textcoords="offset points", xytext=(3, 3), color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel(_("bits per entry (codes + one fp32 scale per chunk)"))
    ax.set_ylabel(_("relative error"))
    ax.set_title(_("one scale per tensor vs per chunk (labels: chunk size)"))
    ax.legend(fontsize="small")
    return ax


def bias(b, ax=None):
    """Error of the average of T decoded copies: stochastic falls like 1/sqrt(T), nearest stays."""
    ax = _ax(ax, (5.5, 3.5))
    t = np.asarray(b.draws, dtype=float)
    ax.loglog(t, b.stochastic, "o-", label=_("stochastic rounding"))
    ax.loglog(t, b.nearest, "s-", label=_("round to nearest"))
    ax.loglog(t, b.stochastic[0] / np.sqrt(t), ":", color="gray", label=_("1/sqrt(T)"))
    ax.set_xlabel(_("copies averaged, T"))
    ax.set_ylabel(_("||mean - g|| / ||g||"))
    ax.set_title(_("unbiased: the average converges to the truth"))
    ax.legend(fontsize="small")
    return ax


def tiny_updates(sums, ax=None):
    """Running sum of a small repeated push, as each rounding delivers it: the mean of the
    stochastic runs, and the band that holds the middle 95% of the single runs."""
    ax = _ax(ax, (5.5, 3.2))
    steps = np.arange(1, len(sums["true"]) + 1)
    runs = np.asarray(sums["runs"])
    ax.plot(steps, sums["true"], "k--", label=_("true sum"))
    ax.fill_between(steps, np.percentile(runs, 2.5, axis=0), np.percentile(runs, 97.5, axis=0), color="tab:blue",
                    alpha=0.2, lw=0, label=_("stochastic rounding: {share:.0%} of single runs").format(share=0.95))
    ax.plot(steps, sums["stochastic"], color="tab:blue",
            label=_("stochastic rounding: mean of {n} runs").format(n=runs.shape[0]))
    ax.plot(steps, sums["nearest"], color="tab:orange", label=_("round to nearest"))
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("total delivered"))
    ax.set_title(_("a push of {v:.3g} per step, grid step {v2:.3g}").format(v=sums['true'][0], v2=sums['step']))
    ax.legend(fontsize="small")
    return ax


def variance(rows, ax=None):
    """QSGD: measured E||Q(x)-x||^2/||x||^2 beside the bound, per number of levels."""
    ax = _ax(ax, (5.5, 3.5))
    pos = np.arange(len(rows))
    ax.bar(pos - 0.2, [r.measured for r in rows], 0.4, label=_("measured"))
    ax.bar(pos + 0.2, [r.bound for r in rows], 0.4, label=_("bound min(d/s², √d/s)"))
    ax.set_xticks(pos, [_("s={levels}\n{bits} bit").format(levels=r.levels, bits=r.bits) for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel(_("variance / ||x||²"))
    ax.set_title(_("QSGD: measured variance under the bound"))
    ax.legend(fontsize="small")
    return ax


def training(histories, fig=None, metric: str = "accuracy"):
    """Held-out metric against steps and against MB sent per worker, one line per run."""
    fig, (a, b) = _fig(fig, (10, 3.5), ncols=2)
    for h in histories:
        ys = h.evals[metric]
        style = {"color": "k", "ls": "--"} if h.scheme == "dense" else {}
        a.plot(h.eval_steps, ys, label=word(h.scheme), **style)
        cum = np.concatenate([[0.0], np.cumsum(h.bytes_per_worker)]) / 1e6
        pts = [(cum[s], y) for s, y in zip(h.eval_steps, ys) if s > 0]   # 0 bytes has no log position
        b.plot([p[0] for p in pts], [p[1] for p in pts], label=word(h.scheme), **style)
    a.set_xlabel(_("step"))
    b.set_xlabel(_("MB sent per worker (log scale)"))
    b.set_xscale("log")
    for ax in (a, b):
        ax.set_ylabel(metric_name(metric, histories[0].task if histories else None))
        ax.legend(fontsize="small")
    a.set_title(_("per step"))
    b.set_title(_("per byte sent"))
    fig.tight_layout()
    return fig


def stacked(rows, ax=None):
    """Where the bytes of a sparse packet go: header, indices, values."""
    ax = _ax(ax, (6.5, 2.8))
    names = [word(r["scheme"]) for r in rows]
    left = np.zeros(len(rows))
    for part, color in zip(PARTS, ("tab:gray", "tab:orange", "tab:blue")):
        vals = np.array([r[part] for r in rows], dtype=float)
        ax.barh(names, vals, left=left, color=color, label=_(part))  # the column name, shown translated
        left += vals
    for i, r in enumerate(rows):
        ax.text(left[i], i, "  " + _("{nbytes} B (R={ratio})").format(nbytes=r["bytes"], ratio=word(f"{r['R']:.0f}x")),
                va="center", fontsize=8)
    ax.set_xlim(0, left.max() * 1.35)
    ax.invert_yaxis()
    ax.set_xlabel(_("bytes on the wire"))
    ax.legend(fontsize="small", loc="lower right")
    return ax


def snap(s, fig=None, show: int = 40):
    """Top: `show` values on the number line snapping to the grid. Bottom: the error
    histogram of the whole tensor, with the half-step bound."""
    fig, (top, bottom) = _fig(fig, (8, 4.2), nrows=2, gridspec_kw={"height_ratios": [1.2, 1]})
    x = s.x[:show].numpy()
    y = s.y[:show].numpy()
    grid = s.grid.numpy()
    lo, hi = float(min(x.min(), y.min(), grid.min())), float(max(x.max(), y.max(), grid.max()))
    if len(grid) <= 64:
        top.vlines(grid, -0.4, 1.4, color="lightgray", lw=0.8, zorder=0)
    else:
        top.text(0.01, 0.9, _("{v} grid levels (too dense to draw)").format(v=len(grid)), transform=top.transAxes, fontsize=8)
    from matplotlib.collections import LineCollection
    top.add_collection(LineCollection([[(a, 1), (b, 0)] for a, b in zip(x, y)], colors="tab:gray", lw=0.6))
    top.scatter(x, np.ones_like(x), s=14, color="tab:blue", label=_("sent"), zorder=3)
    top.scatter(y, np.zeros_like(y), s=14, color="tab:red", label=_("decoded"), zorder=3)
    top.set_yticks([0, 1], [_("decoded"), _("original")])
    top.set_xlim(lo - 0.05 * (hi - lo + 1e-12), hi + 0.05 * (hi - lo + 1e-12))
    top.set_ylim(-0.4, 1.4)
    top.set_title(_("{name}: {nbytes} bytes (R={ratio}), relative error {rel_error:.3f}").format(
        name=word(s.name), nbytes=s.nbytes, ratio=word(f"{s.ratio:.1f}x"), rel_error=s.rel_error))
    scaled = s.error_in_half_steps
    if scaled is not None:
        # each entry against its own chunk's half step, so one pair of dashed lines fits every chunk
        err = scaled.numpy()
        bottom.hist(err, bins=60, color="tab:purple", alpha=0.8)
        for v in (-1.0, 1.0):
            bottom.axvline(v, color="tab:red", ls="--")
        bottom.set_title(_("error of all {v} entries, each in half-steps of its own chunk; dashed: the rounding-to-nearest bound").format(v=len(err)), fontsize=9)
        bottom.set_xlabel(_("(decoded - original) / (own chunk's step / 2)"))
        spread = max(abs(err.min()), abs(err.max()), 1.2)
    else:
        err = s.error.numpy()
        bottom.hist(err, bins=60, color="tab:purple", alpha=0.8)
        bottom.set_title(_("error of all {v} entries (1 bit: no grid bound)").format(v=len(err)), fontsize=9)
        bottom.set_xlabel(_("decoded - original"))
        spread = max(abs(err.min()), abs(err.max()), 1e-12)
    bottom.set_xlim(-spread * 1.05, spread * 1.05)
    if not math.isfinite(spread):
        bottom.set_xlim(-1, 1)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.92, bottom=0.12, hspace=0.45)
    return fig
