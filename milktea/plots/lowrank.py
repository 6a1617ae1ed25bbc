"""PowerSGD figures (chapter 06b): the spectrum of a gradient, the rank sweep, the warm start."""
from __future__ import annotations

import numpy as np

from ..i18n import N_, _
from ..tables import word

# the rank sweep's "relative error" column is one power step from a random start
_SWEEP_LEGEND = {"relative error": N_("one step from a random start")}
_TRACE_LEGEND = (N_("warm start"), N_("cold start"), N_("best possible (SVD)"))   # warm_start_trace's keys


def _axes(axes, n):
    if axes is None:
        import matplotlib.pyplot as plt
        _fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4))
    return axes


def spectrum(spec: dict, ax=None):
    """Singular values (left axis, log) and the share of ||M||^2 the top r hold (right axis)."""
    ax = _axes(ax, 1)
    s = np.asarray(spec["singular values"])
    r = np.arange(1, s.size + 1)
    ax.semilogy(r, s, "o-", ms=3, label=_("singular value"))
    ax.set_xlabel("r")
    ax.set_ylabel(_("singular value σ_r"))
    twin = ax.twinx()
    twin.plot(r, np.asarray(spec["energy"]), color="tab:red", label=_("share of ‖M‖² in the top r"))
    twin.set_ylim(0, 1.02)
    twin.set_ylabel(_("share of ‖M‖² in the top r"), color="tab:red")
    m, n = spec["shape"]
    ax.set_title(_("spectrum of a {m} x {n} layer gradient").format(m=m, n=n), fontsize=10)
    return ax


def rank_sweep(rows: list, ax=None):
    """Relative error against R, one point per rank: one cold step, warm steps, the SVD optimum."""
    ax = _axes(ax, 1)
    R = [r["R"] for r in rows]
    keys = [k for k in rows[0] if k not in ("rank", "R")]
    for k, style in zip(keys, ("o--", "s-", "k:")):
        ax.plot(R, [r[k] for r in rows], style, label=_(_SWEEP_LEGEND[k]) if k in _SWEEP_LEGEND else word(k), ms=4)
    for r in rows:
        ax.annotate(f"r={r['rank']}", (r["R"], r[keys[0]]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    # the sweep's own ratios as ticks: a log axis spanning less than two decades labels its minor
    # ticks (2×10⁰, 3×10⁰, ...), which overlap
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator
    ax.xaxis.set_major_locator(FixedLocator(R))
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:.3g}")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_("compression ratio R (real packet)"))
    ax.set_ylabel(_("relative error"))
    ax.legend(fontsize=8)
    ax.set_title(_("PowerSGD: rank sweep"), fontsize=10)
    return ax


def warm_start(trace: dict, ax=None):
    """Per-step relative error with and without the warm start."""
    ax = _axes(ax, 1)
    for k, style in zip(trace, ("-o", "--s", "k:")):
        ax.plot(np.arange(1, len(trace[k]) + 1), trace[k], style, ms=3, label=word(k))
    ax.set_xlabel(_("training step"))
    ax.set_ylabel(_("relative error of the rank-r report"))
    ax.legend(fontsize=8)
    ax.set_title(_("one power step per training step"), fontsize=10)
    return ax
