"""Chapter 08's real failure in one figure: the quorum's size at each outer step against the
clock (left), each replica group's training loss (right), the kill, restart and rejoin
marked on both."""
from __future__ import annotations

from ..i18n import _
from .quantization import _fig


def _running_mean(xs: list, n: int) -> list:
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x - (xs[i - n] if i >= n else 0.0)
        out.append(total / min(i + 1, n))
    return out


def quorum_timeline(result, fig=None, smooth: int = 10):
    """Left: members of each committed quorum against seconds since the start. Right: each
    group's training loss (a running mean of `smooth` inner steps) against the same clock:
    a killed group's line stops, its new process's line (dashed) starts where it trained."""
    fig, (left, right) = _fig(fig, (11, 3.4), ncols=2)
    done = [r for r in result.quorum_log if r["committed"]]
    left.step([r["time"] for r in done], [len(r["members"]) for r in done], where="post", color="k")
    for r in result.quorum_log:
        if r["recovering"]:
            left.plot(r["time"], len(r["members"]), "o", color="tab:green", label=_("a group recovers"))
        if not r["committed"]:
            left.plot(r["time"], len(r["members"]), "x", color="tab:red", label=_("not committed"))
    top = max((len(r["members"]) for r in done), default=1)
    left.set_ylim(0, top + 0.7)
    left.set_yticks(range(top + 1))
    left.set_ylabel(_("replica groups in the quorum"))
    for g, points in result.loss.items():
        by_proc, last = [[]], None
        for t, step, loss in points:
            if last is not None and step < last:       # a new process of the same group
                by_proc.append([])
            by_proc[-1].append((t, loss))
            last = step
        for i, line in enumerate(by_proc):
            if line:
                right.plot([p[0] for p in line], _running_mean([p[1] for p in line], smooth), lw=1, color=f"C{int(g)}",
                           ls="-" if i == 0 else "--", label=_("group {g}").format(g=g) if i == 0 else None)
    right.set_ylabel(_("training loss (mean of {n} steps)").format(n=smooth))
    for k in result.kills:
        for ax in (left, right):
            ax.axvline(k["killed"], color="tab:red", ls=":", lw=1)
            if k["restarted"] is not None:
                ax.axvline(k["restarted"], color="tab:orange", ls=":", lw=1)
            if k["rejoined"] is not None:
                ax.axvline(k["rejoined"], color="tab:green", ls=":", lw=1)
        left.annotate(_("kill"), (k["killed"], 0.2), rotation=90, fontsize=8, color="tab:red")
        if k["restarted"] is not None:
            left.annotate(_("restart"), (k["restarted"], 0.2), rotation=90, fontsize=8, color="tab:orange")
        if k["rejoined"] is not None:
            left.annotate(_("rejoined"), (k["rejoined"], 0.2), rotation=90, fontsize=8, color="tab:green")
    for ax in (left, right):
        ax.set_xlabel(_("seconds since the run started"))
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        if seen:
            ax.legend(seen.values(), seen.keys(), fontsize="small")
    fig.tight_layout()
    return fig
