"""One replica group of a fault-tolerant run: a process with its own copy of the model, its
data shard, its inner optimizer and its ledgers, kept in step with the other groups by
torchft's Manager (one rank per group here, training on the CPU, its reports crossing on
torchft's gloo process group; a group of several ranks is torchft's HSDP).

Each exchange (after every H / P inner steps, as in `milktea.local`):
1. a quorum: the Manager asks the lighthouse which groups are alive; a group that is
   behind (restarted, or it missed a commit) receives a live peer's state first (below);
2. each group's report, delta = theta[f] - rows[f] through its compressor and ledger, is
   all-gathered over torchft's process group with the group's id and token count;
3. the Manager's commit: only if every member's collective succeeded does any group take
   the outer step; otherwise each group puts its ledger back as it was before sending,
   drops the inner steps since the last exchange (rows = theta, as torchft's DiLoCo does)
   and the next exchange forms a new quorum.

What a rejoining group receives from a peer: head office's parameters theta, the outer
optimizer's momentum, the peer's local parameters and inner AdamW state, the exchanges
in flight, the data generator's position, the inner step count and torchft's step. What
it does not receive: the peer's ledgers and compressor streams. A ledger is one group's
own debt, the part of its own reports it has not sent yet; a copy of a peer's would send
that peer's debt twice (the peer still holds it and sends it). So the rejoining group
rebuilds its ledgers from zero, and whatever its predecessor owed is lost with it: a
group that was only cut off, not killed, drops its ledger too, since it refers to outer
steps the quorum took without it.

    python -m milktea.local.ft.group SPEC GROUP INCARNATION    (what the launcher starts)
"""
from __future__ import annotations

import json
import os
import time

import torch

from ..core import Core
from ..dist import RankRun
from ..exchange import weighted_mean
from .config import replica_id


class Events:
    """One JSON object per line, flushed as written: what the launcher and the quorum log read."""

    def __init__(self, path: str, group: int, incarnation: int):
        self.f = open(path, "a", encoding="utf-8")
        self.group, self.incarnation = group, incarnation

    def __call__(self, event: str, **kw) -> None:
        kw.update(e=event, group=self.group, incarnation=self.incarnation, time=time.time())
        self.f.write(json.dumps(kw) + "\n")
        self.f.flush()


class Late(RuntimeError):
    """A group that joined a run under way found itself alone in its first quorum: the
    others had finished (or died) before it rejoined, and it has no state to go on from."""


class FTCore(Core):
    """The Core of one replica group: its reports cross through torchft (`side`)."""

    def __init__(self, scheme, theta, slices, group: int, side):
        super().__init__(scheme, theta, slices, [group])
        self.group, self.side = group, side

    def _send(self, f, deltas):
        side, s, g = self.side, self.slices[f], self.group
        healed = side.quorum()                       # may replace this group's state (a peer's)
        if side.joining:
            if not healed and side.pg.members == [g]:
                raise Late(f"replica group {g} joined a run under way, but its first quorum holds only itself")
            side.joining = False
        step = side.manager.current_step()
        tok = 0 if (healed or side.manager.errored()) else self.tokens[0][f]
        before = self.reports.snapshot(g, f)
        data, nbytes = torch.empty(0, dtype=torch.uint8), 0
        if tok:
            sent, nbytes = self.reports.send(g, f, deltas(0, s))
            data = sent.to_tensor() if not isinstance(sent, torch.Tensor) else sent.contiguous().view(torch.uint8)
            self.sent_now[0] += nbytes
        got = side.allgather(g, tok, healed, data)
        ok = side.manager.should_commit()
        self.tokens[0][f] = 0
        recovering = sorted({h[0] for h, _ in got if h[2]} if got is not None else ({g} if healed else set()))
        side.record(step=step, fragment=f, t=self.t, committed=ok, recovering=recovering, sent_bytes=nbytes,
                    heard=sorted(h[0] for h, _ in got if h[1] > 0) if got is not None else [],
                    ledger_norm=self._ledger_norm(f))
        if not ok:                                   # nothing was delivered anywhere
            self.reports.restore(g, f, before)
            self.rows[0, s].copy_(self.theta[s])
            return None
        reports = sorted((h[0], h[1], x) for h, x in got if h[1] > 0)
        self.quorum.append((self.t, f, [w for w, _, _ in reports]))
        if not reports:
            return None
        return weighted_mean([self._decode(x) for _, _, x in reports], [tok for _, tok, _ in reports])

    def _decode(self, data: torch.Tensor) -> torch.Tensor:
        from ...packet import Packet
        if self.scheme.compressor is None:
            return data.clone().view(torch.float32).to(self.theta.device)
        return self.reports.decode(Packet.from_tensor(data.cpu())).to(self.theta.device).reshape(-1)

    # --- recovery -------------------------------------------------------------------------
    def recovery_state(self, gen: torch.Generator) -> dict:
        """What this group gives a peer that rejoins (copies: the peer reads them later)."""
        return {"scheme": repr(self.scheme), "t": self.t, "theta": self.theta.clone(), "rows": self.rows.clone(),
                "opt": {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in self.opt_state.items()},
                "outer": [{k: v.clone() for k, v in s.items()} for s in self.outer_state],
                "pending": {int(f): [land, x.clone()] for f, (land, x) in self.pending.items()},
                "gen": gen.get_state()}

    def receive(self, state: dict, gen: torch.Generator) -> int:
        """Take a peer's state (`recovery_state`); this group's ledgers start from zero.
        Returns the bytes received."""
        if state["scheme"] != repr(self.scheme):
            raise ValueError(f"replica group {self.group} was sent the state of a run of {state['scheme']}, but it "
                             f"runs {self.scheme!r}: every group of a run needs the same scheme")
        dev = self.theta.device
        self.take_books(state)
        self.pending = {int(f): (int(land), x.clone().to(dev)) for f, (land, x) in state["pending"].items()}
        self.tokens = [[0] * len(self.slices)]
        self.reports.reset_ledger(self.group)          # rebuilt from zero, never a peer's
        gen.set_state(state["gen"])
        received = _tensor_bytes(state)
        self.recovery_bytes += received
        return received

    def _ledger_norm(self, f: int) -> float | None:
        r = self.reports.ledger(self.group, f)
        return None if r is None else float(r.float().norm())


class Side:
    """This group's torchft side: its store, process group and Manager, its events."""

    def __init__(self, run, spec: dict, group: int, events: Events):
        from datetime import timedelta

        from torch.distributed import TCPStore
        from torchft.manager import Manager

        from .engine import process_group
        ft = spec["ft"]
        self.run, self.events, self.group, self.ft = run, events, group, ft
        self.store = TCPStore(ft.host, 0, is_master=True, wait_for_workers=False)
        self.pg = process_group(ft.timeout_s, run.device)   # NCCL when the group's model is on a GPU
        self.healed, self.received, self.exchanges, self.joining = False, 0, 0, False
        self.manager = Manager(
            pg=self.pg, load_state_dict=self._receive, state_dict=self._give, min_replica_size=ft.min_groups,
            use_async_quorum=False, timeout=timedelta(seconds=ft.timeout_s),
            quorum_timeout=timedelta(seconds=ft.quorum_timeout_s), connect_timeout=timedelta(seconds=ft.connect_s),
            rank=0, world_size=1, store_addr=ft.host, store_port=self.store.port, lighthouse_addr=spec["lighthouse"],
            replica_id=replica_id(group), hostname=ft.host, init_sync=False,
            heartbeat_interval=timedelta(milliseconds=min(100, ft.heartbeat_ms // 4)))

    def quorum(self) -> bool:
        """Start this exchange's quorum; True if this group received a peer's state in it."""
        self.healed = False
        try:
            self.manager.start_quorum()
        except Exception as e:   # noqa: BLE001  (torchft raises what its RPC raised)
            raise RuntimeError(f"replica group {self.group}: no quorum within {self.ft.quorum_timeout_s:g} s "
                               f"(is the lighthouse running, and are at least {self.ft.min_groups} groups "
                               f"alive?): {type(e).__name__}: {str(e).splitlines()[0][:300]}") from None
        return self.healed

    def allgather(self, group: int, tokens: int, healed: bool, data: torch.Tensor):
        from .engine import allgather_reports, header
        if self.manager.errored():
            return None
        try:
            return allgather_reports(self.pg, header(group, tokens, healed, data.numel()), data.cpu())
        except Exception as e:   # noqa: BLE001  (a lost peer: gloo raises RuntimeError, or worse)
            self.manager.report_error(e)
            return None

    def record(self, **kw) -> None:
        """One line of this group's quorum log."""
        self.exchanges += 1
        kw.update(quorum=self.pg.quorum_id, members=list(self.pg.members),
                  received_bytes=self.received if self.group in kw["recovering"] else 0)
        self.events("quorum", **kw)

    # --- recovery: what a peer gives, what this group receives (see the module's docstring)
    def _give(self) -> dict:
        self.events("gave", step=self.manager.current_step())
        return self.run.core.recovery_state(self.run.gen)

    def _receive(self, state: dict) -> None:
        self.received = self.run.core.receive(state, self.run.gen)
        self.healed = True


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, dict):
        return sum(_tensor_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(v) for v in x)
    return 0


class GroupRun(RankRun):
    """RankRun for replica group `group` of `groups`: the data shard and batches of
    milktea.local's rank of the same number, its reports through torchft."""

    def __init__(self, spec: dict, group: int, events: Events):
        self.spec, self.group, self.events = spec, group, events
        super().__init__(spec["scheme"], spec["run"], rank=group, world=spec["groups"])

    def make_core(self, theta, slices, link):
        core = FTCore(self.scheme, theta, slices, self.group, side=None)
        self.core = core                            # the Side's recovery reads it
        core.side = Side(self, self.spec, self.group, self.events)
        return core


def train_group(spec: dict, group: int, incarnation: int = 0) -> dict:
    """Run replica group `group` to the end of the run; its events go to the run's folder."""
    from .engine import require
    from .lighthouse import check_not_running, wait_for_groups
    require()
    ft, folder = spec["ft"], spec["folder"]
    torch.set_num_threads(ft.threads)
    events = Events(os.path.join(folder, f"group{group}-{incarnation}.jsonl"), group, incarnation)
    events("start", pid=os.getpid())
    if spec.get("standby"):                         # loaded; wait until the launcher lets it go
        from ...tasks import make_task
        make_task(spec["run"].task, hidden=spec["run"].hidden, seed=spec["run"].seed)
        events("loaded")
        while not os.path.exists(spec["standby"]):
            time.sleep(0.02)
        events("go")
    st = check_not_running(spec["lighthouse"], group, ft.heartbeat_ms)
    run = GroupRun(spec, group, events)
    side, H = run.core.side, spec["scheme"].inner_steps
    side.joining = st["quorum_id"] > 0              # the run is under way: this group must catch up
    events("ready", joining=side.joining)
    wait_for_groups(spec["lighthouse"], spec.get("expect", range(spec["groups"])), ft.heartbeat_ms,
                    ft.quorum_timeout_s)
    try:
        while run.core.t < spec["run"].steps:
            began = time.perf_counter()
            loss = run.step()
            if ft.pace_s:
                time.sleep(max(0.0, ft.pace_s - (time.perf_counter() - began)))
            events("step", t=run.core.t, outer=run.core.t // H, loss=loss, sent=run.core.sent_now[0])
    except Late as e:
        events("late", reason=str(e))
        side.manager.shutdown(wait=False)
        return None
    with torch.no_grad():
        from ..dist import _evaluation_model
        final = run.task.evaluate(_evaluation_model(run))
    path = os.path.join(folder, f"group{group}-{incarnation}.theta.pt")
    torch.save(run.core.theta.cpu(), path)
    events("done", final=final, t=run.core.t, step=side.manager.current_step(), theta=path)
    side.manager.shutdown(wait=False)
    return final


def main(argv=None) -> None:
    from .proc import entry
    entry(train_group, argv)


if __name__ == "__main__":
    main()
