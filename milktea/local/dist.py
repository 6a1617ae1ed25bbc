"""Local steps as real processes: one worker per rank, the reports all-gathered through
milktea's collectives (and an emulated link), the same `DiLoCo` scheme and `Core` as the
simulator. Under torchrun (gloo on CPU, NCCL on CUDA) or milktea's launcher:

    torchrun --nproc-per-node 4 -m milktea.local --task gpt --inner-steps 50 --steps 200 --bits 8
    python -m milktea.local --workers 4 --inner-steps 50 --steps 200 --bits 8 --link 1

Every rank draws its batches as the simulator's worker of the same number does, so a run
here and `milktea.local.simulate` with the same settings train the same thing (equal up to
float rounding: each process computes its own gradient instead of one batched call).

When a rank dies, the others fail in their next exchange; each then saves the state of the
last outer step it completed (with `checkpoint=` a folder) and stops with `PeerLost`, and
milktea's launcher names the rank that died first. `resume=True` starts again from those
files; a rank whose file is missing starts from a peer's (its ledgers empty).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..checks import check_int, check_number
from ..packet import Packet
from .config import DiLoCo, DataParallel
from .core import Core
from .fragments import split


class PeerLost(RuntimeError):
    """A peer left during an exchange; this rank saved what it could and stopped."""


@dataclass(frozen=True)
class RunConfig:
    """What a distributed local-step run trains and how (the scheme aside)."""
    task: str = "gpt"              # see milktea.tasks.TASKS
    steps: int = 200               # inner steps per worker (a multiple of H)
    batch: int = 8
    seed: int = 0
    hidden: int = 32               # the digits MLP's width
    link_gbit: float | None = None
    latency_us: float = 50.0
    checkpoint: str | None = None  # a folder: rank<r>.pt after every outer step
    resume: bool = False

    def __post_init__(self):
        check_int(self.steps, "steps", 1), check_int(self.batch, "batch", 1), check_int(self.seed, "seed", 0)
        if self.link_gbit is not None:
            check_number(self.link_gbit, "link_gbit", 0, open_low=True)
        if self.resume and not self.checkpoint:
            raise ValueError("resume=True needs checkpoint= the folder the states were saved in")


class RankCore(Core):
    """The Core of one rank: its own row, the other workers' reports from the wire."""

    def __init__(self, scheme, theta, slices, comm):
        super().__init__(scheme, theta, slices, [comm.rank])
        self.comm = comm

    def collect(self, fragment, reports):
        mine = torch.empty(0, dtype=torch.uint8)
        if reports:
            _, sent, _ = reports[0]
            mine = sent.to_tensor() if isinstance(sent, Packet) else sent.contiguous().view(torch.uint8)
        try:
            arrived = self.comm.all_gather_bytes(mine.to(self.theta.device), step=self.t)
        except RuntimeError as e:          # gloo and NCCL report a lost peer this way
            raise PeerLost(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from e
        got = []
        for data in arrived:
            if data.numel():
                x = (Packet.from_tensor(data.cpu()) if self.scheme.compressor is not None
                     else data.clone().view(torch.float32))
                got.append((self.reports.decode(x).to(self.theta.device).reshape(-1), 1))
        return got


class Batches:
    """The batches of worker `rank` out of `world`, drawn as the simulator's worker of the
    same number draws them: every worker draws the same [world, L] keys from one generator
    seeded with `seed` and takes its own row, so the generator's state is the same on every
    worker after the same number of steps (a worker that rejoins can take a peer's)."""

    def __init__(self, task, rank: int, world: int, batch: int, seed: int, device):
        shards = task.shards(world)
        self.L = max(len(y) for _, y in shards)
        self.x, self.y = (t.to(device) for t in shards[rank])
        self.rank, self.world, self.B, self.device = rank, world, min(batch, self.L), device
        self.gen = torch.Generator().manual_seed(seed)

    def next(self, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """(inputs, targets, weights, examples): padding rows (a short shard) weigh 0."""
        n = len(self.y)
        if self.B == self.L:                  # the whole shard, as the simulator takes it
            idx = torch.arange(self.L)
        else:                                 # the simulator's draw for every worker, this one's row
            keys = torch.rand(self.world, self.L, generator=self.gen)[self.rank]
            keys[n:] = 2.0
            idx = keys.argsort()[:self.B]
        real = idx < n
        idx = torch.where(real, idx, torch.zeros_like(idx))   # padding: the shard's first example, weight 0
        weight = real.to(dtype).to(self.device)
        return self.x[idx.to(self.device)], self.y[idx.to(self.device)], weight, int(real.sum())


class RankRun:
    """One rank's worker: the model's parameters are views of its row (or of theta under
    data parallelism), the batches those of the simulator's worker `rank`. `rank` and
    `world` default to the process group's; a subclass gives its own Core (`make_core`)."""

    def __init__(self, scheme, cfg: RunConfig, link=None, *, rank: int | None = None, world: int | None = None):
        from ..distributed.train import device_for_rank
        from ..tasks import make_task
        if not isinstance(scheme, (DiLoCo, DataParallel)):
            raise TypeError(f"scheme must be milktea.local.DiLoCo(...) or DataParallel(...), got {type(scheme).__name__}")
        if cfg.steps % scheme.inner_steps:
            raise ValueError(f"steps={cfg.steps} is not a multiple of inner_steps H={scheme.inner_steps}")
        self.scheme, self.cfg = scheme, cfg
        if rank is None:
            rank, world = dist.get_rank(), dist.get_world_size()
        self.rank, self.world = rank, world
        self.device = device_for_rank()
        self.task = make_task(cfg.task, hidden=cfg.hidden, seed=cfg.seed)
        self.model = self.task.model().to(self.device)
        named = list(self.model.named_parameters())
        theta = torch.cat([p.detach().reshape(-1) for _, p in named])
        fragments = scheme.fragments if isinstance(scheme, DiLoCo) else 1
        slices = split([(n, p.numel()) for n, p in named], fragments)
        self.core = self.make_core(theta, slices, link)
        self.params, offset = [], 0
        for _, p in named:
            p.data = self.core.rows[0, offset:offset + p.numel()].view_as(p)
            self.params.append(p)
            offset += p.numel()
        self.batches = Batches(self.task, self.rank, self.world, cfg.batch, cfg.seed, self.device)
        self.gen = self.batches.gen
        self.last_good: dict | None = None

    def make_core(self, theta, slices, link) -> Core:
        from ..distributed.comm import Comm
        return RankCore(self.scheme, theta, slices, Comm(None, link))

    def step(self) -> float:
        xb, yb, weight, examples = self.batches.next(self.core.theta.dtype)
        for p in self.params:
            p.grad = None
        per_example = self.task.loss(self.model(xb), yb)
        loss = (per_example * weight).sum() / weight.sum()
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in self.params])[None]
        self.core.add_tokens(0, examples * (int(math.prod(yb.shape[1:])) or 1))
        if isinstance(self.scheme, DiLoCo):
            self.scheme.inner.step(self.core.rows, grads, self.core.opt_state)
            self.core.after_inner_step()
        else:
            self.core.after_inner_step(grads=grads)
        return float(loss.detach())

    def state_dict(self) -> dict:
        return {"core": self.core.state_dict(), "gen": self.gen.get_state(), "rank": self.rank,
                "scheme": repr(self.scheme)}

    def load_state_dict(self, state: dict) -> None:
        if state["scheme"] != repr(self.scheme):
            raise ValueError(f"the checkpoint is of {state['scheme']}, this run is {self.scheme!r}")
        core = dict(state["core"])
        if state["rank"] != self.rank:          # a peer's file: its books, not its ledgers
            core["reports"] = self.core.reports.state_dict()
            core["tokens"] = [[0] * len(self.core.slices)]
        self.core.load_state_dict(core)
        self.gen.set_state(state["gen"])

    def path(self, rank: int) -> str:
        return os.path.join(self.cfg.checkpoint, f"rank{rank}.pt")

    def save(self, state: dict) -> None:
        os.makedirs(self.cfg.checkpoint, exist_ok=True)
        tmp = self.path(self.rank) + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.path(self.rank))      # never a half-written file


def train(scheme, cfg: RunConfig | dict | None = None, link=None, on_step=None) -> dict:
    """Train this rank's worker (the process group must be initialised); the summary of
    the run, the same on every rank: final held-out metrics of head office's parameters,
    loss per step (mean over ranks), bytes this rank sent per exchange step."""
    from ..distributed.worker import progress
    cfg = cfg if isinstance(cfg, RunConfig) else RunConfig(**(cfg or {}))
    if link is None and cfg.link_gbit is not None:
        from ..distributed.link import EmulatedLink
        link = EmulatedLink.gbit(cfg.link_gbit, cfg.latency_us * 1e-6)
    run = RankRun(scheme, cfg, link)
    if cfg.resume:
        own, peers = run.path(run.rank), [run.path(r) for r in range(run.world)]
        source = own if os.path.exists(own) else next((p for p in peers if os.path.exists(p)), None)
        if source is None:
            raise FileNotFoundError(f"resume=True but no checkpoint in {cfg.checkpoint}")
        run.load_state_dict(torch.load(source, weights_only=True))
    H, losses, sent = scheme.inner_steps, [], []
    while run.core.t < cfg.steps:
        try:
            losses.append(run.step())
        except PeerLost as e:
            where = run.path(run.rank) if cfg.checkpoint and run.last_good is not None else None
            if where:
                run.save(run.last_good)
            saved = f"; the state after inner step {run.last_good['core']['t']} is in {where}" if where else ""
            raise PeerLost(f"rank {run.rank}: a peer left during the exchange after inner step "
                           f"{run.core.t}{saved} ({e})") from None
        sent.append(list(run.core.sent_now))
        progress()
        if on_step is not None:
            on_step(run)
        if run.core.t % H == 0:
            run.last_good = run.state_dict()
            if cfg.checkpoint:
                run.save(run.last_good)
    # the summary: the same on every rank
    mine = torch.tensor(losses, dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(run.world)]
    dist.all_gather(every, mine)
    with torch.no_grad():
        final = run.task.evaluate(_evaluation_model(run))
    return {"scheme": scheme.label, "workers": run.world, "steps": run.core.t, "outer_steps": run.core.t // H,
            "loss": torch.stack(every).mean(0).tolist(), "bytes_sent": [s[0] for s in sent], "final": final,
            "theta": run.core.theta.cpu().clone()}


def _evaluation_model(run: RankRun):
    """The model with head office's parameters (theta), the rows left as they are."""
    import copy
    model = copy.deepcopy(run.model)
    offset = 0
    for p in model.parameters():
        p.data = run.core.theta[offset:offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    return model
