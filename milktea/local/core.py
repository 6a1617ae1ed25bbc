"""The local-step algorithm itself, the same for simulated workers and for real processes.

`Core` holds head office's parameters theta (one flat vector), the local parameters of the
workers this process runs (`rows`, [R, n]: every worker in the simulator, one under
torchrun), their inner optimizer's state, the outer optimizer's state per fragment, the
ledgers, the timetable and the exchanges in flight. Subclasses say how the reports of all
workers are gathered (`collect`): in one process they are all here; under torchrun they
cross the wire.

One inner step (`after_inner_step`, once the rows have stepped):
1. each fragment due is sent: delta = theta[f] - rows[w, f] for every open worker that
   trained on it since its last exchange, through the worker's compressor and ledger;
2. head office takes the token-weighted mean of what arrives and steps its outer optimizer
   on theta[f];
3. the new theta[f] lands `overlap` steps later in every open worker:
   rows[w, f] = alpha rows[w, f] + (1 - alpha) theta[f]   (alpha 0: a plain copy).
"""
from __future__ import annotations

import torch

from .config import DataParallel, DiLoCo, closed
from .exchange import Reports, weighted_mean
from .fragments import Schedule


class Core:
    def __init__(self, scheme, theta: torch.Tensor, slices: list[slice], ranks: list[int], outages=()):
        if not isinstance(scheme, (DiLoCo, DataParallel)):
            raise TypeError(f"scheme must be milktea.local.DiLoCo(...) or DataParallel(...), "
                            f"got {type(scheme).__name__}")
        self.scheme, self.theta, self.slices = scheme, theta, list(slices)
        self.ranks, self.outages = list(ranks), tuple(outages)
        self.local = isinstance(scheme, DiLoCo)
        self.H = scheme.inner_steps
        self.optimizer = scheme.inner if self.local else scheme.optimizer
        # data parallel: the optimizer steps theta itself, as one row
        self.rows = theta.expand(len(self.ranks), -1).clone() if self.local else theta.view(1, -1)
        self.opt_state = self.optimizer.start(self.rows)
        self.outer_state = [{} for _ in self.slices]
        self.reports = Reports(scheme.compressor, scheme.uses_feedback, self.ranks, len(self.slices),
                               momentum=getattr(scheme, "momentum_correction", 0.0))
        self.schedule = Schedule(self.H, len(self.slices), scheme.overlap if self.local else 0)
        self.t = 0                                       # inner steps done
        self.tokens = [[0] * len(self.slices) for _ in self.ranks]
        self.pending: dict[int, tuple[int, torch.Tensor]] = {}   # fragment -> (lands after step, theta[f])
        self.sent_now = [0] * len(self.ranks)            # bytes each row's worker sent after this step
        self.quorum: list[tuple[int, int, list[int]]] = []   # (step, fragment, workers heard)
        self.recovery_bytes = 0

    # --- who is open ---------------------------------------------------------------------
    def is_open(self, worker: int, step: int) -> bool:
        """Whether `worker` trains inner step `step` (1, 2, ...)."""
        return not closed(self.outages, worker, (step - 1) // self.H)

    def open_rows(self, step: int) -> list[int]:
        return [i for i, w in enumerate(self.ranks) if self.is_open(w, step)]

    # --- the exchange --------------------------------------------------------------------
    def collect(self, fragment: int, reports: list[tuple[int, object, int]]) -> list[tuple[torch.Tensor, int]]:
        """Every open worker's (decoded pseudo-gradient, tokens), in worker order, from this
        process's own (worker, sent, tokens) reports."""
        return [(self.reports.decode(sent), tok) for _, sent, tok in reports]

    def _send(self, f: int, deltas) -> torch.Tensor | None:
        s = self.slices[f]
        mine = []
        for i, w in enumerate(self.ranks):
            tok = self.tokens[i][f]
            if tok == 0 or not self.is_open(w, self.t):
                continue
            sent, nbytes = self.reports.send(w, f, deltas(i, s))
            self.sent_now[i] += nbytes
            mine.append((w, sent, tok))
        got = self.collect(f, mine)
        self.quorum.append((self.t, f, [w for w, _, _ in mine]))
        for i in range(len(self.ranks)):
            self.tokens[i][f] = 0
        if not got:
            return None
        return weighted_mean([x for x, _ in got], [tok for _, tok in got])

    def after_inner_step(self, grads=None) -> None:
        """Count the step (rows have stepped; `grads` only for data parallel, which
        exchanges them instead) and run the exchanges due."""
        self.t += 1
        self.sent_now = [0] * len(self.ranks)
        if not self.local:
            mean = self._send(0, lambda i, s: grads[i, s])
            if mean is not None:
                self.optimizer.step(self.rows, mean.view(1, -1), self.opt_state)
            return
        for f in self.schedule.sends(self.t):
            s = self.slices[f]
            mean = self._send(f, lambda i, s: self.theta[s] - self.rows[i, s])
            if mean is not None:
                self.scheme.outer.step(self.theta[s], mean, self.outer_state[f])
                self.pending[f] = (self.t + self.schedule.overlap, self.theta[s].clone())
        for f in self.schedule.lands(self.t):
            self._land(f)

    def _land(self, f: int) -> None:
        if f not in self.pending:
            return
        _, new = self.pending.pop(f)
        s, alpha = self.slices[f], self.scheme.alpha
        for i in self.open_rows(max(self.t, 1)):
            if alpha == 0:
                self.rows[i, s].copy_(new)
            else:
                self.rows[i, s].mul_(alpha).add_(new, alpha=1 - alpha)

    def add_tokens(self, i: int, n: int) -> None:
        for f in range(len(self.slices)):
            self.tokens[i][f] += n

    # --- a worker reopens: it copies its state from a peer --------------------------------
    def reopen(self, i: int, peer: int) -> None:
        """Row i takes row `peer`'s parameters and inner optimizer state (a live recovery
        from a peer); its ledgers start empty."""
        self.rows[i].copy_(self.rows[peer])
        copied = self.rows[i].numel() * self.rows.element_size()
        for v in self.opt_state.values():
            if isinstance(v, torch.Tensor):
                v[i].copy_(v[peer])
                copied += v[i].numel() * v.element_size()
            elif isinstance(v, list):
                v[i] = v[peer]
        self.tokens[i] = [0] * len(self.slices)
        self.reports.reset_ledger(self.ranks[i])
        self.recovery_bytes += copied

    # --- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "theta": self.theta.clone(), "rows": self.rows.clone(),
                "opt": {k: (v.clone() if isinstance(v, torch.Tensor) else v)
                        for k, v in self.opt_state.items()},
                "outer": [{k: v.clone() for k, v in s.items()} for s in self.outer_state],
                "reports": self.reports.state_dict(), "tokens": [list(r) for r in self.tokens],
                "pending": {str(f): [land, x.clone()] for f, (land, x) in self.pending.items()},
                "recovery_bytes": self.recovery_bytes,
                "quorum": [[t, f, list(ws)] for t, f, ws in self.quorum]}

    def take_books(self, state: dict) -> None:
        """The step count, head office's parameters, the local parameters and both optimizers'
        states from `state` (a saved run's, or a peer's to a rejoining replica group)."""
        dev = self.theta.device
        self.t = int(state["t"])
        self.theta.copy_(state["theta"])
        self.rows.copy_(state["rows"])
        for k, v in state["opt"].items():
            if isinstance(v, torch.Tensor):
                self.opt_state[k].copy_(v)
            else:
                self.opt_state[k] = None if v is None else list(v)
        self.outer_state = [{k: v.clone().to(dev) for k, v in s.items()} for s in state["outer"]]

    def load_state_dict(self, state: dict) -> None:
        if tuple(state["rows"].shape) != tuple(self.rows.shape):
            raise ValueError(f"the saved state has {tuple(state['rows'].shape)} local parameters, this run "
                             f"{tuple(self.rows.shape)}: same task, workers and scheme needed")
        self.take_books(state)
        self.reports.load_state_dict(state["reports"])
        self.tokens = [list(r) for r in state["tokens"]]
        self.pending = {int(f): (int(land), x.clone()) for f, (land, x) in state["pending"].items()}
        self.recovery_bytes = int(state["recovery_bytes"])
        self.quorum = [(int(t), int(f), list(ws)) for t, f, ws in state["quorum"]]
