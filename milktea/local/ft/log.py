"""What a fault-tolerant run leaves: every group's events, read back into the quorum log
(one record per quorum), a summary per replica group and the timeline of each fault.

The quorum log is a list of plain dicts, one per quorum, in the order they were formed:

    step        the exchange it is for, counted from 0 (with one fragment: the outer step),
                torchft's step (every group at the same step after recovery)
    quorum      the lighthouse's quorum id (it changes when the members change or a commit failed)
    members     the replica groups in the quorum (sorted ids)
    recovering  the members that received a peer's state at this quorum (sorted ids)
    heard       the members whose reports entered the average (not the recovering ones)
    committed   whether the outer step was taken (False: a member was lost mid-exchange)
    time        seconds since the run started, when the first member recorded it
    received_bytes  bytes of state the recovering members received

    >>> records = [{"step": 4, "quorum": 2, "members": [0, 1], "recovering": [], "heard": [0, 1],
    ...             "committed": True, "time": 11.0, "group": g, "received_bytes": 0} for g in (0, 1)]
    >>> merge(records, t0=10.0)
    [{'step': 4, 'quorum': 2, 'members': [0, 1], 'recovering': [], 'heard': [0, 1], 'committed': True, 'time': 1.0, 'received_bytes': 0}]
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass, field


def read_events(folder: str) -> list[dict]:
    """Every event of every group's every incarnation, in time order."""
    out = []
    for path in glob.glob(os.path.join(folder, "group*-*.jsonl")):
        with open(path, encoding="utf-8") as f:
            out += [json.loads(line) for line in f if line.strip()]
    return sorted(out, key=lambda e: e["time"])


def merge(records: list[dict], t0: float) -> list[dict]:
    """Each group's own "quorum" records, merged into one record per quorum."""
    by = {}
    for r in records:
        key = (r["quorum"], r["step"])
        m = by.get(key)
        if m is None:
            by[key] = m = {"step": r["step"], "quorum": r["quorum"], "members": list(r["members"]),
                           "recovering": set(), "heard": set(), "committed": True, "time": r["time"] - t0,
                           "received_bytes": 0}
        m["recovering"] |= set(r["recovering"])
        m["heard"] |= set(r["heard"])
        m["committed"] = m["committed"] and bool(r["committed"])
        m["time"] = min(m["time"], r["time"] - t0)
        m["received_bytes"] += int(r.get("received_bytes") or 0)
    out = sorted(by.values(), key=lambda m: m["time"])
    for m in out:
        m["recovering"], m["heard"] = sorted(m["recovering"]), sorted(m["heard"])
    return out


@dataclass
class FTResult:
    """A finished fault-tolerant run.

    quorum_log: one dict per quorum (the module's docstring says its keys).
    groups: one dict per replica group: "group", "incarnations" (processes it had),
        "outer steps" (committed exchanges its report entered), "quorum sizes", "bytes
        sent", "bytes received" (to rejoin), "final" (held-out metrics, None if it did
        not finish), "theta" (its final parameters' file), "late" (restarted too late).
    kills: one dict per injected fault, times in seconds since the run started: "killed",
        "restarted", "loaded" (its new process reached the lighthouse), "shrank" (the first
        committed quorum without it), "rejoined" (its first committed quorum back) and
        "rejoined_step", "recovery_s" (kill to rejoined), "shrink_s", "source" (the group
        it received its state from).
    final: the held-out metrics of head office's parameters; agree: the largest difference
    between the finishing groups' final parameters (0.0: one model)."""
    scheme: str
    folder: str
    wall_s: float
    standby: bool = False                             # restarts were standby processes let go (not cold starts)
    quorum_log: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    kills: list = field(default_factory=list)
    final: dict = field(default_factory=dict)
    agree: float = 0.0
    loss: dict = field(default_factory=dict)          # group -> [(seconds, inner step, train loss), ...]
    gave: list = field(default_factory=list)          # (seconds, group) each time a group sent its state to a peer
    records: list = field(default_factory=list)       # every group's own quorum records (ledger norms, bytes)
    left_behind: list = field(default_factory=list)

    def save(self, path: str | None = None) -> str:
        """The quorum log as JSON (the whole result beside it, as result.json); returns its path."""
        path = path or os.path.join(self.folder, "quorum.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.quorum_log, f, indent=1)
        with open(os.path.join(os.path.dirname(path) or ".", "result.json"), "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=1)
        return path

    def theta(self, group: int | None = None):
        """A group's final parameters (the lowest id that finished by default)."""
        import torch
        row = next(r for r in self.groups if r["theta"] and (group is None or r["group"] == group))
        return torch.load(row["theta"], weights_only=True)


def collect(job) -> FTResult:
    """Read a finished FTJob's folder into its FTResult (and save it there)."""
    import torch
    events = read_events(job.folder)
    t0 = job.t0
    log = merge([e for e in events if e["e"] == "quorum"], t0)
    groups, thetas = [], {}
    for g in job.ids:
        mine = [e for e in events if e["group"] == g]
        recs = [e for e in mine if e["e"] == "quorum"]
        done = [e for e in mine if e["e"] == "done"]
        if done:
            thetas[g] = torch.load(done[-1]["theta"], weights_only=True)
        groups.append({
            "group": g, "incarnations": 1 + max((e["incarnation"] for e in mine), default=0),
            "outer steps": sum(1 for r in recs if r["committed"] and g in r["heard"]),
            "quorum sizes": sorted({len(r["members"]) for r in recs}),
            "bytes sent": sum(int(r["sent_bytes"]) for r in recs),
            "bytes received": sum(int(r.get("received_bytes") or 0) for r in recs),
            "final": done[-1]["final"] if done else None, "theta": done[-1]["theta"] if done else None,
            "late": any(e["e"] == "late" for e in mine)})
    kills = []
    for g, k in sorted(job.kills.items()):
        back = [e for e in events if e["e"] == "quorum" and e["group"] == g and e["incarnation"] > 0 and e["committed"]]
        ready = [e for e in events if e["e"] == "ready" and e["group"] == g and e["incarnation"] > 0]
        gave = [e for e in events if e["e"] == "gave" and back and e["time"] <= back[0]["time"]]
        after = [m for m in log if m["time"] >= k["killed"] - t0 and g not in m["members"] and m["committed"]]
        row = {"group": g, "at_step": k["at_step"], "at_inner_step": k["at_inner_step"], "killed": k["killed"] - t0,
               "restarted": None if k.get("restarted") is None else k["restarted"] - t0,
               "shrank": after[0]["time"] if after else None,
               "loaded": ready[0]["time"] - t0 if ready else None,
               "rejoined": back[0]["time"] - t0 if back else None, "rejoined_step": back[0]["step"] if back else None,
               "source": gave[-1]["group"] if gave else None}
        row["recovery_s"] = None if row["rejoined"] is None else row["rejoined"] - row["killed"]
        row["shrink_s"] = None if row["shrank"] is None else row["shrank"] - row["killed"]
        kills.append(row)
    ref = min(thetas) if thetas else None
    agree = max((float((thetas[g] - thetas[ref]).abs().max()) for g in thetas), default=0.0)
    res = FTResult(
        scheme=job.scheme.label, folder=job.folder, standby=job.standby, wall_s=max((e["time"] for e in events), default=t0) - t0,
        quorum_log=log, groups=groups, kills=kills, agree=agree,
        final=next((r["final"] for r in groups if r["group"] == ref), {}) if ref is not None else {},
        loss={g: [(e["time"] - t0, e["t"], e["loss"]) for e in events if e["e"] == "step" and e["group"] == g]
              for g in job.ids},
        gave=[(e["time"] - t0, e["group"]) for e in events if e["e"] == "gave"],
        records=[{k: v for k, v in e.items() if k != "e"} | {"time": e["time"] - t0} for e in events
                 if e["e"] == "quorum"],
        left_behind=job.left_behind())
    res.save()
    return res
