"""Figures of the head-office dashboard: the pipeline, live curves, the evaluation map."""
from __future__ import annotations

import math

from .quantization import _ax, _fig
from ..tables import word
from ..i18n import N_, _

COLORS = {"compute": "tab:blue", "compress": "tab:green", "encode": "tab:olive", "communicate": "tab:orange",
          "decode": "tab:purple", "update": "tab:gray"}


def _size(b: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= f:
            return f"{b / f:.3g} {unit}"
    return f"{b:.0f} B"


def pipeline(stages, ax=None, title: str = ""):
    """Six boxes, compute -> compress -> encode -> communicate -> decode -> update, each with
    its time; the arrows carry the bytes handed on; a bar below shows the shares of time."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    ax = _ax(ax, (11, 2.9))
    n = len(stages)
    total = sum(s["seconds"] for s in stages) or 1.0
    w, gap = 1.0, 0.55
    for i, s in enumerate(stages):
        x = i * (w + gap)
        ax.add_patch(FancyBboxPatch((x, 1.0), w, 0.9, boxstyle="round,pad=0.03", fc=COLORS.get(s["stage"], "w"),
                                    alpha=0.85, ec="k"))
        ax.text(x + w / 2, 1.62, _(s["stage"]), ha="center", va="center", fontsize=9, color="white", weight="bold")
        ax.text(x + w / 2, 1.27, f"{1e3 * s['seconds']:.1f} ms", ha="center", va="center", fontsize=9, color="white")
        if i < n - 1:
            ax.add_patch(FancyArrowPatch((x + w + 0.03, 1.45), (x + w + gap - 0.03, 1.45), arrowstyle="-|>",
                                         mutation_scale=12, color="k"))
            ax.text(x + w + gap / 2, 2.05, _size(s["bytes"]), ha="center", fontsize=7, rotation=0)
    left = 0.0
    span = n * (w + gap) - gap
    for s in stages:
        width = span * s["seconds"] / total
        ax.barh(0.45, width, left=left, height=0.35, color=COLORS.get(s["stage"], "w"), ec="white")
        if width > 0.45:
            ax.text(left + width / 2, 0.45, f"{s['seconds'] / total:.0%}", ha="center", va="center",
                    fontsize=7, color="white")
        left += width
    ax.text(0, 0.05, _("one step: {v:.1f} ms in all (bar: share of the step per stage, not overlapped)").format(v=1e3 * total),
            fontsize=8)
    ax.set_xlim(-0.1, span + 0.1)
    ax.set_ylim(-0.1, 2.3)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


LIVE = (("throughput", N_("samples / s (all workers)"), False), ("latency_ms", N_("step latency, ms"), True),
        ("wire_mb", N_("MB on the wire per worker (total)"), False), ("loss", N_("training loss"), True))


def live(series: dict, fig=None, status: str = ""):
    """Four live panels, one line per scheme."""
    fig, axes = _fig(fig, (11, 5.2), ncols=2, nrows=2)
    for ax, (key, label, log) in zip(axes, LIVE):
        for name, s in series.items():
            if s["step"]:
                ys = s[key]
                ax.plot(s["step"], ys, label=word(name), lw=1.4)
        ax.set_title(_(label), fontsize=10)
        if log and any(s[key] for s in series.values()):
            ax.set_yscale("log")
        ax.set_xlabel(_("step"), fontsize=8)
        ax.tick_params(labelsize=8)
    if any(s["step"] for s in series.values()):
        axes[0].legend(fontsize=7, loc="best")
    if status:
        fig.suptitle(status, fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.09, hspace=0.45, wspace=0.2)
    return fig


def evaluation(rows, ax=None):
    """Speedup against accuracy, one marker per scheme; marker area grows with the ratio R."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax = _ax(ax, (8, 3.8))
    for r in rows:
        sp = r.get("speedup")
        if not isinstance(sp, float) or math.isnan(sp):
            continue
        R = r.get("R") if isinstance(r.get("R"), float) and math.isfinite(r["R"]) else 1.0
        ax.scatter(sp, r["test accuracy"], s=40 + 25 * math.log2(max(R, 1.0)) ** 1.5, alpha=0.75,
                   label=_("{scheme} (R={ratio:.0f})").format(scheme=word(r["scheme"]), ratio=R))
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    # a narrow log range gets a single decade tick: place readable ticks across the data instead
    speeds = [r["speedup"] for r in rows if isinstance(r.get("speedup"), float) and r["speedup"] > 0]
    lo, hi = min(speeds + [1.0]) / 1.15, max(speeds + [1.0]) * 1.15
    nice = [0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 30, 50, 100]
    ticks = [t for t in nice if lo <= t <= hi]
    ax.set_xlim(lo, hi)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: word(f"{v:g}x")))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_("speedup over dense (measured step time)"))
    ax.set_ylabel(_("test accuracy at the end"))
    ax.set_title(_("faster to the right, better up; bigger marker = higher ratio R"), fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def repriced(rows, gbit: float, ax=None):
    """Step time per scheme if the run had a `gbit` link."""
    ax = _ax(ax, (7, 3))
    names = [r["scheme"] for r in rows]
    ax.barh([word(n) for n in names], [r["step ms"] for r in rows],
            color=["tab:gray" if n.startswith("dense") else "tab:blue" for n in names])
    for i, r in enumerate(rows):
        ax.text(r["step ms"], i, " " + word(f"{r['speedup']:.2f}x"), va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(_("ms per step (cost model with this run's compute, codec and collectives)"))
    ax.set_title(_("the same run on a {gbit:.3g} Gbit/s link").format(gbit=gbit), fontsize=10)
    return ax
