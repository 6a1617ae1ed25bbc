"""Chapter 08's real failure and `python -m milktea.bench ft`: replica groups on torchft, one
killed with SIGKILL and restarted, read from the quorum log. Every sentence is built from
the run's numbers (its words turn when the numbers do).

    >>> log = [{"step": s, "members": [0, 1, 2] if s < 2 or s > 4 else [0, 1], "recovering": [2] if s == 5 else [],
    ...         "committed": True, "time": float(s)} for s in range(7)]
    >>> [r[_("outer steps")] for r in quorum_rows(log)]
    ['0-1', '2-4', '5', '6']
"""
from __future__ import annotations

from ..i18n import N_, _
from ..tables import joined, yes_no
from . import verdicts
from .local import Target

LR = 3e-3
# the chapter's run: small enough for 2 cores; each inner step lasts at least `pace` seconds
# (a bigger model's compute, without the CPU), and the restarting process is a standby,
# loaded with the others (loading torch takes seconds on a busy 2-core machine)
DEMO = dict(groups=3, inner_steps=10, outer_steps=40, kill_step=4, restart_after=1.0, pace=0.02, heartbeat_ms=500,
            ratio=0.1)
COLUMNS = (N_("outer steps"), N_("members"), N_("recovering"), N_("committed"), N_("from (s)"))
GROUP_COLUMNS = (N_("group"), N_("processes"), N_("outer steps heard"), N_("quorum sizes"), N_("kB sent"),
                 N_("kB received"), N_("held-out loss"))


def available() -> bool:
    """Whether torchft is installed (the course's set-up installs it on Linux x86-64, Python 3.11)."""
    from ..local.ft.engine import available as ok
    return ok()


def unavailable_note() -> str:
    return _("`torchft` is not installed here, so this run is skipped (`pip install torchft==0.2.0`: a wheel for Python 3.11 on Linux x86-64).")


def plan(**kw) -> str:
    """The chapter's run in one sentence, from its settings."""
    d = dict(DEMO, **kw)
    return _("Started in the background: a lighthouse and {n} replica groups of the digits MLP, each a process of its own, DiLoCo with H = {H} and Top-{pct:.0%} reports with their ledgers, {steps} outer steps. Group {g} will be killed with SIGKILL halfway through outer step {k}; {r:g} s later a new process takes its place (started with the others and waiting, loaded, as a standby).").format(
        n=d["groups"], H=d["inner_steps"], pct=d["ratio"], steps=d["outer_steps"], g=d["groups"] - 1, k=d["kill_step"],
        r=d["restart_after"])


def demo_job(folder: str | None = None, **kw):
    """Start the chapter's run in the background (an FTJob; `.wait()` for its result): the
    digits MLP on 3 replica groups, DiLoCo with Top-10% reports and their ledgers, group 2
    killed halfway through outer step 4 and restarted 1 s later."""
    from ..compressors import TopK
    from ..local import AdamW, DiLoCo
    from ..local.dist import RunConfig
    from ..local.ft import FTConfig, Kill, start
    d = dict(DEMO, **kw)
    H, last = d["inner_steps"], d["groups"] - 1
    scheme = DiLoCo(inner_steps=H, inner=AdamW(lr=LR), compressor=TopK(ratio=d["ratio"]))
    ft = FTConfig(heartbeat_ms=d["heartbeat_ms"], join_ms=2000, timeout_s=5.0, pace_s=d["pace"])
    return start(scheme, RunConfig(task="digits", hidden=64, steps=H * d["outer_steps"], batch=16), groups=d["groups"],
                 ft=ft, faults=[Kill(last, d["kill_step"], d["restart_after"])], folder=folder, standby=True)


def _span(a: int, b: int) -> str:
    return f"{a}" if a == b else f"{a}-{b}"


def quorum_rows(log: list[dict]) -> list[dict]:
    """The quorum log as a table: consecutive quorums with the same members (and nobody
    recovering) on one row."""
    rows, key = [], None
    for r in log:
        k = (tuple(r["members"]), tuple(r["recovering"]), r["committed"])
        if rows and k == key and not r["recovering"]:
            rows[-1][1] = r["step"]
            continue
        key = k
        rows.append([r["step"], r["step"], r])
    return [{_("outer steps"): _span(a, b), _("members"): joined(map(str, r["members"])),
             _("recovering"): joined(map(str, r["recovering"])) or "-", _("committed"): yes_no(r["committed"]),
             _("from (s)"): round(r["time"], 1)} for a, b, r in rows]


def group_rows(result) -> list[dict]:
    return [{_("group"): g["group"], _("processes"): g["incarnations"], _("outer steps heard"): g["outer steps"],
             _("quorum sizes"): joined(map(str, g["quorum sizes"])), _("kB sent"): round(g["bytes sent"] / 1e3, 1),
             _("kB received"): round(g["bytes received"] / 1e3, 1),
             _("held-out loss"): None if g["final"] is None else round(g["final"]["loss"], 4)} for g in result.groups]


def _last_ledger(result, group: int, before: float) -> float | None:
    norms = [r["ledger_norm"] for r in result.records
             if r["group"] == group and r["time"] < before and r.get("ledger_norm") is not None]
    return norms[-1] if norms else None


def sentences(result, heartbeat_ms: int, inner_steps: int) -> list[str]:
    """What the run did, in order: the kill, the smaller quorum, the rejoin, the end; then
    what the simulation leaves out, each with this run's number."""
    (k,) = result.kills
    g = k["group"]
    out = [_("Group {g} was killed with SIGKILL at {t:.1f} s, halfway through outer step {s}.").format(
        g=g, t=k["killed"], s=k["at_step"])]
    if k["shrink_s"] is not None:
        n = next(len(r["members"]) for r in result.quorum_log if r["time"] >= k["shrank"] and r["committed"])
        out.append(_("{dt:.1f} s later the others took their next outer step with a quorum of {n}: the lighthouse had stopped counting group {g} once it had not heard its heartbeat for {hb} ms.").format(
            dt=k["shrink_s"], n=n, g=g, hb=heartbeat_ms))
    if k["rejoined"] is None:
        out.append(_("Its new process did not rejoin before the others finished: on this machine, loading it took longer than the rest of the run."))
    else:
        load = (k["loaded"] or k["restarted"]) - k["restarted"]
        kb = next(r["received_bytes"] for r in result.quorum_log if r["recovering"]) / 1e3
        src = _("group {s}").format(s=k["source"]) if k["source"] is not None else _("a peer")
        how = (_("Its new process (a standby, loaded in advance) was let go at {r:.1f} s and reached the lighthouse {load:.1f} s later") if result.standby else
               _("Its new process started at {r:.1f} s and spent {load:.1f} s loading")).format(r=k["restarted"], load=load)
        out.append(how + _("; it trained {H} inner steps of its own, then asked for a quorum: at outer step {s} ({t:.1f} s, {rec:.1f} s after the kill) it received {kb:.1f} kB from {src}, and its reports counted again from the next outer step.").format(
            H=inner_steps, s=k["rejoined_step"], t=k["rejoined"], rec=k["recovery_s"], kb=kb, src=src))
    done = [x for x in result.groups if x["final"] is not None]
    same = _("the same parameters, bit for bit") if result.agree == 0 else \
        _("parameters that differ by up to {d:.2g}").format(d=result.agree)
    out.append(_("At the end, {n} of {m} groups hold {same}; held-out loss {loss:.3f}.").format(
        n=len(done), m=len(result.groups), same=same, loss=result.final.get("loss", float("nan"))))
    return out


def gaps(result, heartbeat_ms: int, sim_kb: float | None = None) -> list[str]:
    """What the simulated outage leaves out, with this run's numbers."""
    (k,) = result.kills
    out = []
    if k["shrink_s"] is not None:
        out.append(_("**Heartbeat timeouts.** A simulated branch is closed between two outer steps and head office knows at once; here the others waited {dt:.1f} s for the lighthouse to give up on the dead group ({hb} ms without a heartbeat).").format(
            dt=k["shrink_s"], hb=heartbeat_ms))
    if k["rejoined"] is not None:
        kb = next(r["received_bytes"] for r in result.quorum_log if r["recovering"]) / 1e3
        text = _("**Recovery traffic.** The rejoining group received {kb:.1f} kB (head office's parameters, the outer momentum, a peer's local parameters and AdamW state, the data position), and {rec:.1f} s passed from the kill to its first outer step back.").format(
            kb=kb, rec=k["recovery_s"])
        if sim_kb is not None:
            from ..i18n import language
            text += ("" if language() == "zh" else " ") + \
                _("The simulated reopening copied {s:.1f} kB and took no time.").format(s=sim_kb)
        out.append(text)
    norm = _last_ledger(result, k["group"], k["killed"])
    if norm is not None:
        peers = [_last_ledger(result, g["group"], k["killed"]) for g in result.groups if g["group"] != k["group"]]
        peers = [p for p in peers if p is not None]
        out.append(_("**A stale ledger.** At its last exchange, group {g}'s ledger held a remainder of norm {n:.3g} it had not sent yet (the others': {p}). The new process started with an empty ledger: that remainder is lost. A group cut off but still alive would come back with a ledger owed for outer steps taken without it, so milktea drops it on rejoining and never copies a peer's, whose debt the peer still holds.").format(
            g=k["group"], n=norm, p=joined(f"{x:.3g}" for x in peers)))
    return out


# --- the bench's targets --------------------------------------------------------------------
def check_loss(result, reference, gap: float = 0.02) -> Target:
    text = _("{scheme} with group {g} killed: final loss {loss} (target: within {gap:.0%})").format(
        scheme=result.scheme, g=result.kills[0]["group"] if result.kills else "-", gap=gap,
        loss=verdicts.relative(result.final["loss"], reference.final["loss"], _("the run without a fault"), limit=gap))
    return Target(text, abs(result.final["loss"] / reference.final["loss"] - 1) <= gap)


def check_recovery(result, limit_s: float = 30.0) -> Target:
    (k,) = result.kills
    if k["recovery_s"] is None:
        return Target(_("{scheme}: group {g} never rejoined (target: within {s:g} s of the kill)").format(
            scheme=result.scheme, g=k["group"], s=limit_s), False)
    return Target(_("{scheme}: group {g} rejoined {t:.1f} s after the kill, {said} (target: at most {s:g} s)").format(
        scheme=result.scheme, g=k["group"], t=k["recovery_s"], s=limit_s,
        said=verdicts.within(k["recovery_s"], 0, limit_s)), k["recovery_s"] <= limit_s)


def check_left(result, label: str) -> Target:
    n = len(result.left_behind)
    return Target(_("{scheme}, {label}: {n} processes left running after the run (target: 0)").format(
        scheme=result.scheme, label=label, n=n), n == 0)
