"""Figures of chapter 08: loss against bytes sent, the compute share against the link's
speed for several H, and the bytes each inner step puts on the wire."""
from __future__ import annotations

import math

from ..i18n import _
from ..tables import word
from .quantization import _ax, _fig
from .training import metric_name


def _cumulative_mb(history) -> list[float]:
    total, out = 0.0, [0.0]
    for b in history.bytes_per_worker:
        total += b
        out.append(total / 1e6)
    return out


def loss_curves(histories: dict, fig=None):
    """Held-out loss against inner steps (left) and against MB each worker sent (right, log)."""
    fig, (left, right) = _fig(fig, (11, 3.6), ncols=2)
    for name, h in histories.items():
        mb = _cumulative_mb(h)
        left.plot(h.eval_steps, h.evals["loss"], label=word(name))
        xs = [max(mb[s], 1e-3) for s in h.eval_steps]
        right.plot(xs, h.evals["loss"], "o-", ms=3, label=word(name))
    left.set_xlabel(_("inner steps (the same tokens for every run)"))
    right.set_xlabel(_("MB sent per worker (log scale)"))
    right.set_xscale("log")
    task = next(iter(histories.values())).task if histories else None
    for ax in (left, right):
        ax.set_ylabel(metric_name("loss", task))
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def utilisation(curves: dict, ax=None, mark_gbit: float | None = None, mark_label: str = ""):
    """Compute share against link speed, one line per H (from experiments.local.utilisation_curves)."""
    ax = _ax(ax, (6.5, 3.6))
    for H, ys in curves["curves"].items():
        label = _("H = 1 (data parallel)") if H == 1 else _("H = {H}").format(H=H)
        ax.semilogx(curves["gbit"], [100 * y for y in ys], label=label)
    if mark_gbit is not None and math.isfinite(mark_gbit):
        ax.axvline(mark_gbit, color="k", ls=":", lw=1)
        if mark_label:
            ax.annotate(mark_label, (mark_gbit, 5), rotation=90, fontsize=8, xytext=(3, 0),
                        textcoords="offset points")
    ax.set_ylim(0, 102)
    ax.set_xlabel(_("link, Gbit/s per worker"))
    ax.set_ylabel(_("time spent computing (%)"))
    ax.legend(fontsize="small")
    return ax


def bytes_per_step(histories: dict, ax=None, steps: int | None = None):
    """kB each worker sends after every inner step: one tall spike per exchange, or P smaller ones."""
    ax = _ax(ax, (8, 2.8))
    for name, h in histories.items():
        ys = [b / 1e3 for b in h.bytes_per_worker][:steps]
        ax.step(range(1, len(ys) + 1), ys, where="mid", label=word(name))
    ax.set_xlabel(_("inner step"))
    ax.set_ylabel(_("kB sent per worker"))
    ax.legend(fontsize="small")
    return ax
