"""Figures of the engineering chapter: Gantt charts of overlap, bucket sizes, index
encodings, gradient accumulation, and where compression stops paying."""
from __future__ import annotations

import numpy as np

from .quantization import _ax, _fig
from ..tables import word
from ..i18n import N_, _


def gantt(ax, tl, title: str = "", xmax: float | None = None):
    """One step as two rows (compute, link), in milliseconds."""
    ms = 1e3
    f0, f1 = tl.forward
    if f1 > f0:
        ax.broken_barh([(f0 * ms, (f1 - f0) * ms)], (1, 0.8), color="tab:gray", label=_("forward"))
    for i, (s, e) in enumerate(tl.backward):
        ax.broken_barh([(s * ms, (e - s) * ms)], (1, 0.8), color="tab:blue", edgecolor="white",
                       label=_("backward, per bucket") if i == 0 else None)
    for i, (s, e) in enumerate(tl.comm):
        ax.broken_barh([(s * ms, (e - s) * ms)], (0, 0.8), color="tab:orange", edgecolor="white",
                       label=_("exchange, per bucket") if i == 0 else None)
    ax.axvline(tl.total * ms, color="k", lw=1)
    ax.set_yticks([0.4, 1.4], [_("link"), _("compute")])
    ax.set_ylim(-0.2, 2.0)
    if xmax:
        ax.set_xlim(0, xmax * ms)
    ax.set_title(_("{title} ({ms:.0f} ms)").format(title=title, ms=tl.total * ms) if title else f"{tl.total * ms:.0f} ms",
                 fontsize=10)
    return ax


def gantt_grid(predicted: dict, measured: dict, fig=None, title: str | None = None):
    """One row per setting: the cost model's timeline (left) beside the measured one (right);
    `title` above the grid (e.g. which regime)."""
    labels = list(measured)
    fig, axes = _fig(fig, (11, 1.7 * len(labels) + 0.6), ncols=2, nrows=len(labels), sharex=True)
    xmax = 1.05 * max(max(t.total for t in measured.values()), max(t.total for t in predicted.values()))
    for i, label in enumerate(labels):
        gantt(axes[2 * i], predicted[label], _("{label}, predicted").format(label=word(label)), xmax)
        gantt(axes[2 * i + 1], measured[label], _("{label}, measured").format(label=word(label)), xmax)
    for ax in axes[-2:]:
        ax.set_xlabel(_("ms since the step began"))
    axes[1].legend(loc="upper right", fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def bucket_sweep(rows, ax=None):
    """Predicted step time against bucket size."""
    ax = _ax(ax, (6, 3.5))
    mb = [r["bucket MB"] for r in rows]
    ax.semilogx(mb, [1e3 * r["step s"] for r in rows], "o-", label=_("with overlap"))
    ax.semilogx(mb, [1e3 * r["serial s"] for r in rows], "--", color="gray", label=_("no overlap"))
    best = min(rows, key=lambda r: r["step s"])
    ax.plot(best["bucket MB"], 1e3 * best["step s"], "r*", ms=14, label=_("best: {v:g} MB").format(v=best['bucket MB']))
    for r in rows[:: max(1, len(rows) // 6)]:
        ax.annotate(f"{r['buckets']}", (r["bucket MB"], 1e3 * r["step s"]), fontsize=7,
                    textcoords="offset points", xytext=(0, 6))
    ax.set_xlabel(_("bucket size, MB (labels: number of buckets)"))
    ax.set_ylabel(_("ms per step (cost model)"))
    ax.set_title(_("too small pays latency, too big hides nothing"))
    ax.legend(fontsize="small")
    return ax


def index_costs(rows, block: int = 32, fig=None):
    """Left: index bytes per kept entry for each encoding. Right: the gradient's squared norm
    kept by exact Top-K and by blocks."""
    fig, (a, b) = _fig(fig, (11, 3.6), ncols=2)
    r = [row["ratio"] for row in rows]
    for name, style in (("int32", "o-"), ("delta8", "s-"), ("varint", "^-"), ("bitmap", "v-"),
                        (f"block{block}", "D-")):
        a.loglog(r, [row[f"{name} B/entry"] for row in rows], style, label=word(name))
    a.set_xlabel(_("share of entries kept, k/n"))
    a.set_ylabel(_("index bytes per kept entry"))
    a.set_title(_("what 'where' costs"))
    a.legend(fontsize="small")
    b.semilogx(r, [row["top-k norm kept"] for row in rows], "o-", label=_("exact Top-K"))
    b.semilogx(r, [row[f"block{block} norm kept"] for row in rows], "D-", label=_("blocks of {block}").format(block=block))
    b.set_xlabel(_("share of entries kept, k/n"))
    b.set_ylabel(_("share of ||g||² kept"))
    b.set_title(_("what the blocks give up"))
    b.legend(fontsize="small")
    fig.tight_layout()
    return fig


def accumulation(runs, time_rows, fig=None):
    """Left: accuracy against MB exchanged per worker. Right: seconds per micro-batch."""
    fig, (a, b) = _fig(fig, (11, 3.6), ncols=2)
    for run in runs:
        h = run.history
        cum = np.concatenate([[0.0], np.cumsum(h.bytes_per_worker)]) / 1e6
        pts = [(cum[s], y) for s, y in zip(h.eval_steps, h.evals["accuracy"]) if s > 0]
        a.semilogx([p[0] for p in pts], [p[1] for p in pts], "-", label=_("exchange every {accumulate}").format(accumulate=run.accumulate))
    a.set_xlabel(_("MB exchanged per worker"))
    a.set_ylabel(_("test accuracy"))
    a.set_title(_("same samples, fewer exchanges"))
    a.legend(fontsize="small")
    acc = [r["accumulate"] for r in time_rows]
    b.plot(acc, [1e3 * r["s per micro-batch"] for r in time_rows], "o-")
    b.set_xscale("log", base=2)
    b.set_xlabel(_("micro-batches per exchange"))
    b.set_ylabel(_("ms per micro-batch (cost model)"))
    b.set_title(_("the exchange is shared by more work"))
    fig.tight_layout()
    return fig


def speedup(curves, crossings: dict | None = None, ax=None):
    """Speedup over dense against link bandwidth; below 1 compression costs time. `crossings`:
    {name: [milktea.crossings.Crossing, ...]} (reprice.crossings of each curve), each marked
    by a dotted line in the curve's colour, whichever way the curve passes 1."""
    ax = _ax(ax, (6.5, 3.8))
    for name, ys in curves.items():
        if name == "gbit":
            continue
        line, = ax.loglog(curves["gbit"], ys, label=word(name))
        for c in (crossings or {}).get(name, ()):
            ax.axvline(c.at, color=line.get_color(), ls=":", lw=1)
    ax.axhline(1.0, color="k", lw=1)
    ax.fill_between(curves["gbit"], 1e-3, 1.0, color="tab:red", alpha=0.06)
    lo = min(min(v) for k, v in curves.items() if k != "gbit")
    hi = max(max(v) for k, v in curves.items() if k != "gbit")
    ax.set_ylim(min(0.5, lo / 1.3), hi * 1.3)
    ax.set_xlabel(_("link bandwidth, Gbit/s"))
    ax.set_ylabel(_("speedup over dense all-reduce"))
    ax.set_title(_("below the line (shaded), compression costs time"))
    ax.legend(fontsize="small")
    return ax


def ab_step_times(comparison, ax=None):
    """Stacked bars per scheme, all measured: compute (the compute-only probe), codec
    (compress + decode), time inside the collectives, and the rest of the step (what none of
    these accounts for: waiting for the slower rank, the hook's own Python work). A cross marks
    the cost model's prediction. The legend sits outside the bars."""
    rows = [r for r in comparison.rows if "error" not in r]
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.4))
    comp = 1e3 * sum(comparison.compute.values())
    parts = ((N_("compute"), "tab:blue"), (N_("compress + decode"), "tab:green"),
             (N_("inside the collectives (measured)"), "tab:orange"), (N_("rest of the step"), "tab:gray"))
    for i, r in enumerate(rows):
        codec, comm = r.get("codec_ms", 0.0), r.get("comm_ms", 0.0)
        rest = max(0.0, r["step_ms"] - comp - codec - comm)
        left = 0.0
        for (name, color), width in zip(parts, (comp, codec, comm, rest)):
            ax.barh(i, width, left=left, color=color, label=_(name) if i == 0 else None)
            left += width
        ax.plot(r["step_ms"], i, "k|", ms=16, mew=2, label=_("measured step") if i == 0 else None)
        ax.plot(r["predicted_ms"], i, "kx", ms=8, label=_("cost model") if i == 0 else None)
    ax.set_yticks(range(len(rows)), [word(r["label"]) for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(_("ms per step (the bars' parts can overlap in time: their sum may exceed the step)"))
    ax.set_title(_("step time, {where}").format(where=comparison.where.split(_(", "))[0]), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return ax


def ab_accuracy(comparison, ax=None):
    """Test accuracy after the run, one bar per scheme."""
    rows = [r for r in comparison.rows if "error" not in r]
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=(5, 0.45 * len(rows) + 1.4))
    ax.barh([word(r["label"]) for r in rows], [r["accuracy"] for r in rows], color="tab:green")
    ax.invert_yaxis()
    ax.set_xlabel(_("test accuracy after {v} steps").format(v=comparison.config['steps']))
    ax.set_xlim(0, 1)
    return ax


def protocols_by_workers(rows, ax=None):
    """Bytes each worker moves per step against the number of workers, per protocol (log-log)."""
    from ..i18n import _
    ax = _ax(ax, (7, 3.6))
    n = [r["workers"] for r in rows]
    for key, label, style in (("dense MB", _("dense ring all-reduce"), {"color": "k", "ls": "--"}),
                              ("allgather MB", _("all-gather of packets"), {"color": "tab:red"}),
                              ("compressed allreduce MB", _("compressed all-reduce"), {"color": "tab:green"})):
        ax.plot(n, [r[key] for r in rows], marker="o", ms=3, label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_("workers N"))
    ax.set_ylabel(_("MB per worker per step"))
    ax.legend(fontsize="small")
    return ax


def loss_to_target(comparison, tt: dict, ax=None):
    """Each scheme's smoothed training loss against time (its steps × its median step), the
    target loss as a line, and a dot where each scheme reaches it (`time_to_target`)."""
    from ..experiments.time_to_target import smoothed
    ax = _ax(ax, (7, 3.8))
    reached = {r["scheme"]: r for r in tt["rows"]}
    for res in comparison.results:
        if res.get("label") not in reached:
            continue
        r = reached[res["label"]]
        loss = smoothed([x["loss"] for x in res["records"]], tt["window"])
        t = [(i + 1) * r["step ms"] / 1e3 for i in range(len(loss))]
        line, = ax.plot(t, loss, label=word(res["label"]), lw=2.2 if res["label"] == tt["baseline"] else 1.2)
        if r["steps to target"]:
            ax.plot(r["time to target s"], loss[r["steps to target"] - 1], "o", color=line.get_color())
    ax.axhline(tt["target"], color="k", ls="--", lw=1, label=_("target loss"))
    ax.set_yscale("log")
    ax.set_xlabel(_("seconds (steps × the median step)"))
    ax.set_ylabel(_("training loss ({w}-step mean)").format(w=tt["window"]))
    ax.set_title(_("time to the target loss"), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return ax
