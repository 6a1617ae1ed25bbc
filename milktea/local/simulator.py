"""N local-step workers in one process, batched: every worker's gradient at its own
parameters comes from one call (torch.func: vmap over the rows of grad of the loss).

    >>> from milktea import Digits, Quantize
    >>> scheme = DiLoCo(inner_steps=10, inner=SGD(lr=0.1), compressor=Quantize(bits=8))
    >>> h = simulate(Digits(), scheme, workers=4, steps=100, batch=16)
    >>> h.outer_steps, h.final("accuracy") > 0.8, round(h.ratio)   # ~ 10 steps x 4 bytes / 1 byte
    (10, True, 40)

Every worker draws its batches from its own shard exactly as `milktea.simulate` does
(the same generator, the same order), so the same seed gives every scheme the same tokens,
and DataParallel(SGD) trains as `milktea.simulate` does with dense gradients. A worker
that is closed (an `Outage`) skips its batches: the others see the same data as without
the outage.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch.func import functional_call, grad, vmap

from ..checks import check_int
from ..device import pick_device
from ..simulate import History
from ..tasks import Task
from .config import DataParallel, DiLoCo, check_outages
from .core import Core
from .fragments import split
from .optim import SGD  # noqa: F401  (for the example)


@dataclass
class LocalHistory(History):
    """A simulated local-step run: `History` (per inner step: mean loss of the open workers,
    each worker's wire bytes) plus the outer steps, the quorum of each exchange (step,
    fragment, workers heard) and the bytes copied to workers that reopened."""
    outer_steps: int = 0
    quorum: list = field(default_factory=list)
    recovery_bytes: int = 0


class LocalRun:
    """A simulated run that can stop, save its `state_dict`, and go on in another process."""

    def __init__(self, task: Task, scheme, *, workers: int = 4, batch: int | None = 8, seed: int = 0,
                 outages=(), device=None, start: torch.Tensor | None = None):
        if not isinstance(task, Task):
            raise TypeError(f"task must be a milktea Task (e.g. Digits() or CharGPT()), got {type(task).__name__}")
        if not isinstance(scheme, (DiLoCo, DataParallel)):
            raise TypeError(f"scheme must be milktea.local.DiLoCo(...) or DataParallel(...), "
                            f"got {type(scheme).__name__}")
        self.task, self.scheme = task, scheme
        self.workers = check_int(workers, "workers", 1)
        self.seed = check_int(seed, "seed", 0)
        if batch is not None:
            check_int(batch, "batch", 1)
        if outages and not isinstance(scheme, DiLoCo):
            raise ValueError("outages are simulated for local steps (DiLoCo): under data parallelism "
                             "every step waits for every worker")
        self.outages = tuple(outages or ())
        self.device = pick_device(device, name="device")
        self.model = model = task.model().to(self.device)
        named = list(model.named_parameters())
        self.theta = torch.cat([p.detach().reshape(-1) for _, p in named])
        if start is not None:            # a warm start: parameters trained before (one flat vector)
            if not isinstance(start, torch.Tensor) or start.shape != self.theta.shape:
                raise ValueError(f"start must be the model's {self.theta.numel():,} parameters as one flat "
                                 f"tensor (e.g. another run's .theta), got {getattr(start, 'shape', start)!r}")
            self.theta.copy_(start)
        self.layout, offset = [], 0
        for name, p in named:
            p.data = self.theta[offset:offset + p.numel()].view_as(p)     # evaluate() reads theta
            self.layout.append((name, offset, tuple(p.shape)))
            offset += p.numel()
        fragments = scheme.fragments if isinstance(scheme, DiLoCo) else 1
        slices = split([(n, math.prod(s)) for n, _, s in self.layout], fragments)
        check_outages(self.outages, self.workers)     # against the run's length: in train()
        self.core = Core(scheme, self.theta, slices, list(range(self.workers)), self.outages)
        self._data(batch)
        self.history = LocalHistory(task.name, scheme.label, self.workers,
                                    dense_bytes=self.theta.numel() * self.theta.element_size(),
                                    config=dict(scheme=repr(scheme), batch=batch, seed=seed, task=repr(task),
                                                params=self.theta.numel(), device=str(self.device),
                                                outages=[(o.worker, o.start, o.stop) for o in self.outages]))
        self._evaluate()

    def _data(self, batch):
        shards = self.task.shards(self.workers)
        L = max(len(y) for _, y in shards)
        xs, ys, valid = [], [], torch.zeros(self.workers, L, dtype=torch.bool)
        for w, (x, y) in enumerate(shards):      # padded to one [W, L, ...] tensor, as milktea.simulate
            pad = L - len(y)
            xs.append(torch.cat([x, x[:1].expand(pad, *x.shape[1:])]) if pad else x)
            ys.append(torch.cat([y, y[:1].expand(pad, *y.shape[1:])]) if pad else y)
            valid[w, :len(y)] = True
        self.X, self.Y = torch.stack(xs).to(self.device), torch.stack(ys).to(self.device)
        self.valid, self.counts = valid.to(self.device), valid.sum(1).to(self.device)
        self.B = L if batch is None else min(batch, L)
        self.tokens_per_example = int(math.prod(self.Y.shape[2:])) or 1
        self.gen = torch.Generator().manual_seed(self.seed)
        model, task = self.model, self.task
        buffers = dict(model.named_buffers())

        def worker_loss(params, x, y, weight):
            per_example = task.loss(functional_call(model, (params, buffers), (x,)), y)
            loss = (per_example * weight).sum() / weight.sum()
            return loss, loss.detach()
        self._grads_local = vmap(grad(worker_loss, has_aux=True), in_dims=(0, 0, 0, 0))
        self._grads_shared = vmap(grad(worker_loss, has_aux=True), in_dims=(None, 0, 0, 0))

    def _batch(self):
        W, L = self.workers, self.X.shape[1]
        if self.B == L:
            return self.X, self.Y, self.valid
        keys = torch.rand(W, L, generator=self.gen).to(self.device).masked_fill_(~self.valid, 2.0)
        idx = keys.argsort(1)[:, :self.B]
        rows = torch.arange(W, device=self.device)[:, None]
        return self.X[rows, idx], self.Y[rows, idx], idx < self.counts[:, None]

    def _params(self, flat):
        if flat.dim() == 1:
            return {n: flat[o:o + math.prod(s)].view(s) for n, o, s in self.layout}
        return {n: flat[:, o:o + math.prod(s)].view(flat.shape[0], *s) for n, o, s in self.layout}

    def _evaluate(self):
        h = self.history
        h.eval_steps.append(self.core.t)
        for k, v in self.task.evaluate(self.model).items():
            h.evals.setdefault(k, []).append(v)

    def _reopen(self, step: int) -> None:
        """Workers closed during the last outer step and open for this one copy a peer."""
        core, H = self.core, self.scheme.inner_steps
        if step <= H or (step - 1) % H:
            return
        before = [i for i in range(self.workers) if core.is_open(i, step - H)]
        for i in range(self.workers):
            if core.is_open(i, step) and i not in before:
                peers = [j for j in before if core.is_open(j, step)] or before
                core.reopen(i, peers[0])

    def step(self) -> None:
        core, local = self.core, isinstance(self.scheme, DiLoCo)
        step = core.t + 1
        if local:
            self._reopen(step)
        xb, yb, wb = self._batch()
        open_rows = core.open_rows(step)
        flat_params = self._params(core.rows if local else self.theta)
        g, losses = (self._grads_local if local else self._grads_shared)(flat_params, xb, yb, wb.to(self.theta.dtype))
        G = torch.cat([g[n].reshape(self.workers, -1) for n, _, _ in self.layout], dim=1)
        loss = float(losses[open_rows].mean())
        if not math.isfinite(loss):
            raise FloatingPointError(f"{self.scheme.label}: the loss became {loss} at inner step {step}; "
                                     f"try a smaller inner lr")
        for i in open_rows:
            core.add_tokens(i, int(wb[i].sum()) * self.tokens_per_example)
        if local:
            self.scheme.inner.step(core.rows, G, core.opt_state, active=open_rows)
        core.after_inner_step(grads=None if local else G)
        self.history.loss.append(loss)
        self.history.bytes_sent.append(list(core.sent_now))

    def train(self, steps: int, eval_every: int | None = None, progress: bool = False) -> LocalHistory:
        """Take `steps` more inner steps (a multiple of H: a run ends on an outer step) and
        evaluate head office's parameters every `eval_every` steps (default: every H, and
        at least every 20th of the run)."""
        H = self.scheme.inner_steps
        steps = check_int(steps, "steps", 1)
        if steps % H:
            raise ValueError(f"steps={steps} is not a multiple of inner_steps H={H}: a run ends on an outer step")
        end = self.core.t + steps
        check_outages(self.outages, self.workers, end // H)
        every = max(H, steps // 20) if eval_every is None else check_int(eval_every, "eval_every", 1)
        from tqdm.auto import tqdm
        start = time.perf_counter()
        for _ in tqdm(range(steps), desc=self.scheme.label, disable=not progress, leave=False):
            self.step()
            if self.core.t % every == 0 or self.core.t == end:
                self._evaluate()
        h = self.history
        h.wall_time += time.perf_counter() - start
        h.outer_steps, h.quorum, h.recovery_bytes = self.core.t // H, self.core.quorum, self.core.recovery_bytes
        return h

    # --- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything the run needs to go on bit for bit: parameters (global and every
        worker's), inner and outer optimizer states, ledgers and compressor streams, the
        exchanges in flight, the data generator and the history so far."""
        h = self.history
        return {"scheme": repr(self.scheme), "workers": self.workers, "core": self.core.state_dict(),
                "gen": self.gen.get_state(),
                "history": {"loss": list(h.loss), "eval_steps": list(h.eval_steps),
                            "evals": {k: list(v) for k, v in h.evals.items()},
                            "bytes_sent": [list(b) for b in h.bytes_sent], "wall_time": h.wall_time}}

    def load_state_dict(self, state: dict) -> None:
        if state["scheme"] != repr(self.scheme) or state["workers"] != self.workers:
            raise ValueError(f"this state is of {state['workers']} workers running {state['scheme']}; "
                             f"this run has {self.workers} running {self.scheme!r}")
        self.core.load_state_dict(state["core"])
        self.gen.set_state(state["gen"])
        h, s = self.history, state["history"]
        h.loss, h.eval_steps = list(s["loss"]), list(s["eval_steps"])
        h.evals = {k: list(v) for k, v in s["evals"].items()}
        h.bytes_sent, h.wall_time = [list(b) for b in s["bytes_sent"]], float(s["wall_time"])
        H = self.scheme.inner_steps
        h.outer_steps, h.quorum, h.recovery_bytes = self.core.t // H, self.core.quorum, self.core.recovery_bytes


def simulate(task: Task, scheme, *, workers: int = 4, steps: int = 100, batch: int | None = 8, seed: int = 0,
             outages=(), eval_every: int | None = None, device=None, progress: bool = False,
             start: torch.Tensor | None = None) -> LocalHistory:
    """Train `task` with `workers` simulated workers under `scheme` (DiLoCo(...) or
    DataParallel(...)) for `steps` inner steps each; `outages`: Outage(worker, start, stop)
    in outer steps; `start`: parameters to start from (default: the task's initial ones).
    Returns the LocalHistory (evaluated on head office's parameters)."""
    run = LocalRun(task, scheme, workers=workers, batch=batch, seed=seed, outages=outages, device=device,
                   start=start)
    return run.train(steps, eval_every=eval_every, progress=progress)
