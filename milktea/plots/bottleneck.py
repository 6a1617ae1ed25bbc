"""Figures for chapters 00-01: where a training step's time goes, and how collectives scale.

Every function draws on `ax` (a new figure when None) and returns the axes.
"""
from __future__ import annotations

import numpy as np

from ..experiments.bottleneck import AllReduceMeasurement, Breakdown, PhoneNight, Scissors, seconds
from ..i18n import N_, _, count

COMPUTE, COMM, IDLE = "tab:blue", "tab:orange", "tab:red"


def _ax(ax, figsize):
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=figsize)
    return ax


def breakdown_bars(b: Breakdown, ax=None):
    """One step split into compute and communication (as shares of the step), for a ring
    all-reduce and a parameter server; the total seconds are written beside each bar."""
    ax = _ax(ax, (7, 2.4))
    rows = [(N_("parameter server"), b.comm_ps), (N_("ring all-reduce"), b.comm_ring)]
    for y, (_label, comm) in enumerate(rows):
        total = b.compute + comm
        c = b.compute / total if total > 0 else 0.0
        ax.barh(y, c, color=COMPUTE, label=_("compute") if y == 0 else None)
        ax.barh(y, 1 - c, left=c, color=COMM, label=_("waiting for the network") if y == 0 else None)
        ax.text(1.01, y, _("{seconds} per step\n{waiting:.1%} waiting").format(seconds=seconds(total), waiting=1 - c), va="center", fontsize=9)
    ax.set_yticks([0, 1], [_(r[0]) for r in rows])
    ax.set_xlim(0, 1.3)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "25%", "50%", "75%", "100%"])
    ax.set_xlabel(_("share of one step"))
    ax.set_ylim(-0.5, 2.1)
    ax.set_title(_("{params} parameters, {workers} workers, {gbit:.3g} Gbit/s, compute {compute}").format(
        params=count(b.params), workers=b.workers, gbit=b.link.bandwidth / 125e6, compute=seconds(b.compute)), fontsize=10)
    ax.legend(loc="upper center", fontsize=8, ncol=2, frameon=False)
    return ax


def gradient_sizes(rows: list[dict], ax=None):
    """fp32 gradient size of each model (log scale)."""
    ax = _ax(ax, (6, 3))
    names = [r["model"] for r in rows]
    gb = [r["fp32 gradient (GB)"] for r in rows]
    bars = ax.bar(names, gb, color=COMM)
    ax.set_yscale("log")
    ax.set_ylabel(_("GB per gradient (fp32)"))
    for bar, v in zip(bars, gb):
        ax.text(bar.get_x() + bar.get_width() / 2, v * 1.15, f"{v:.3g} GB", ha="center", fontsize=9)
    ax.set_ylim(min(gb) / 3, max(gb) * 6)
    ax.set_title(_("one nightly report = params x 4 bytes"))
    return ax


def ring_bytes(workers, measured, formula, ax=None):
    """Bytes each worker sent in an executed ring all-reduce vs 2(N-1)/N x M."""
    ax = _ax(ax, (5, 3.2))
    ax.plot(workers, formula, "-", color="gray", label="2(N-1)/N x M")
    ax.plot(workers, measured, "o", color=COMM, label=_("counted in the ring run"))
    ax.set_xlabel(_("workers N"))
    ax.set_ylabel(_("bytes sent per worker / M"))
    ax.set_ylim(0, 2.2)
    ax.axhline(2, ls=":", color="gray")
    ax.legend()
    ax.set_title(_("a ring all-reduce sends about 2M per worker, whatever N"))
    return ax


def scaling_plot(sc: dict, ax=None):
    """Seconds per exchange as workers are added: ring vs parameter server."""
    ax = _ax(ax, (5.5, 3.5))
    ax.plot(sc["workers"], sc["ring_time"], "o-", label=_("ring all-reduce"))
    ax.plot(sc["workers"], sc["ps_time"], "s-", label=_("one parameter server"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sc["workers"], [str(n) for n in sc["workers"]])
    ax.set_yscale("log")
    ax.set_xlabel(_("workers N"))
    ax.set_ylabel(_("seconds per exchange"))
    ax.legend()
    ax.set_title(_("the server's link carries 2N x M; a ring link about 2M"))
    return ax


def allreduce_measured(m: AllReduceMeasurement, ax=None, reference_gbits=(1, 10, 100)):
    """Measured all-reduce times (dots) against the cost model fitted to them (line), with
    the model for a few network speeds beside them."""
    from .. import cost
    ax = _ax(ax, (6, 4))
    sizes = np.array(m.sizes, dtype=float)
    grid = np.logspace(np.log10(sizes.min()), np.log10(sizes.max()), 50)
    for g in reference_gbits:
        link = cost.Link.gbit(g)
        ax.plot(grid, [cost.ring_allreduce_time(s, m.workers, link) for s in grid], ":", color="gray", lw=1)
        ax.text(grid[-1], cost.ring_allreduce_time(grid[-1], m.workers, link), _(" {g:g} Gbit/s model").format(g=g),
                fontsize=8, color="gray", va="center")
    ax.plot(grid, m.predicted(grid), "-", color=COMM, label=_("fit: {link}").format(link=m.link))
    ax.plot(sizes, m.times, "o", color="black", label=_("measured ({backend}, {workers} processes)").format(backend=m.backend, workers=m.workers))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("message size (bytes)"))
    ax.set_ylabel(_("seconds per all-reduce"))
    ax.set_xlim(right=grid[-1] * 12)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(_("a real all-reduce on this machine vs the alpha-beta model"), fontsize=10)
    return ax


def phone_night_bars(night: PhoneNight, ax=None):
    """The shop's night: hours of work against hours on the phone, two ways of phoning."""
    ax = _ax(ax, (6.5, 2.4))
    rows = [(N_("everyone phones head office"), night.head_office_hours),
            (N_("each branch phones its neighbour"), night.ring_hours),
            (N_("the day's work"), night.work_hours)]
    colors = [COMM, COMM, COMPUTE]
    ys = np.arange(len(rows))
    ax.barh(ys, [r[1] for r in rows], color=colors)
    for y, (_label, h) in zip(ys, rows):
        ax.text(h, y, f" {seconds(h * 3600)}", va="center", fontsize=9)
    ax.set_yticks(ys, [_(r[0]) for r in rows])
    ax.set_xscale("log")
    ax.set_xlim(min(r[1] for r in rows) / 2, max(r[1] for r in rows) * 20)
    ax.axvline(12, ls=":", color=IDLE, label=_("one night (12 h)"))
    ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel(_("hours (log scale)"))
    ax.set_title(_("{branches} branches, {lines:,} lines each, {lines_per_second:g} lines per second").format(branches=night.branches, lines=night.lines, lines_per_second=night.lines_per_second), fontsize=10)
    return ax


def scissors(sci: Scissors, ax=None):
    """Compute and bandwidth on a log scale, from year 0, with the gap between them shaded."""
    ax = _ax(ax, (5, 3.5))
    ax.semilogy(sci.years, sci.compute, label=_("compute (FLOP/s)"))
    ax.semilogy(sci.years, sci.bandwidth, label=_("bandwidth (bytes/s)"))
    ax.fill_between(sci.years, sci.bandwidth, sci.compute, alpha=0.15, color=IDLE)
    ax.set_xlabel(_("years"))
    ax.set_ylabel(_("relative to year 0"))
    ax.set_title(_("after {years:g} years the gap is {gap:.0f}x").format(years=sci.years[-1], gap=sci.gap[-1]))
    ax.legend()
    return ax
