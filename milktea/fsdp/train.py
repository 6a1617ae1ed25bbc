"""One rank of a small FSDP2 training run: what `milktea.fsdp.run`, the bench and the tests launch.

    from milktea.distributed import launch
    launch(train, 2, args=(RunConfig(task="gpt", steps=5, compressor=Quantize(bits=8, chunk=256)),))

The model is `fully_shard`ed layer by layer, then as a whole (a character GPT's blocks,
or an MLP's linear layers), `milktea.fsdp.compress` is installed (unless `install=False`:
FSDP2 alone, the yardstick), and each rank trains on its own shard of the data with the
same seeded batches whatever is compressed, so two runs differ only by what crossed the wire.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..checks import check_choice, check_int, check_number


@dataclass(frozen=True)
class RunConfig:
    """What one run trains and how its collectives travel.

    task: "gpt" (the character GPT of milktea.gpt: `layers` blocks of width `width`) or
      "mlp" (the digits: `layers` linear layers of width `width`).
    compressor, error_feedback, weights, min_size: as `milktea.fsdp.compress`.
    reduce_dtype: FSDP2's MixedPrecisionPolicy(reduce_dtype=...) (None: the gradients' dtype).
    accumulate: micro-batches per step (set_requires_gradient_sync(False) on all but the last).
    replicas: HSDP over `replicas` copies of the model, each sharded over world / replicas ranks
      (milktea's: the replicate hop through `compressor`; native_hsdp=True: FSDP2's own 2-D mesh).
    reshard_after_forward: True (FSDP2's default: each layer's gathered weights are freed after
      forward and gathered again for backward, ZeRO-3); False keeps them (ZeRO-2's traffic).
    link_gbit: an emulated link for every collective (None: loopback).
    install: False runs FSDP2 alone (no milktea at all); probe: True replaces every
      collective by one that sends nothing (what compute alone costs).
    checkpoint, save_at, resume: a folder for one file per rank, written after step
      `save_at`; resume=True loads it first and trains the remaining steps.
    """
    task: str = "gpt"
    layers: int = 2
    width: int = 96
    steps: int = 10
    batch: int = 16
    lr: float = 3e-3
    optimizer: str = "adamw"
    seed: int = 0
    compressor: object = None
    error_feedback: object = None
    weights: object = None
    min_size: int = 1024
    reduce_dtype: object = None
    accumulate: int = 1
    replicas: int = 1
    native_hsdp: bool = False
    reshard_after_forward: bool = True
    link_gbit: float | None = None
    install: bool = True
    probe: bool = False
    evaluate: bool = False
    return_params: bool = False
    checkpoint: str | None = None
    save_at: int | None = None
    resume: bool = False

    def __post_init__(self):
        check_choice(self.task, ("gpt", "mlp"), "task")
        check_choice(self.optimizer, ("adamw", "sgd"), "optimizer")
        for name, low in (("layers", 1), ("width", 1), ("steps", 1), ("batch", 1), ("accumulate", 1),
                          ("replicas", 1), ("seed", 0)):
            check_int(getattr(self, name), name, low)
        check_number(self.lr, "lr", 0, open_low=True)
        if self.task == "mlp" and self.layers < 2:
            raise ValueError("the mlp task needs layers >= 2 (64 -> width ... -> 10)")
        if self.link_gbit is not None:
            check_number(self.link_gbit, "link_gbit", 0, open_low=True)
        if (self.resume or self.save_at is not None) and not self.checkpoint:
            raise ValueError("save_at and resume need checkpoint= a folder")


def _model_and_data(cfg: RunConfig, world: int, rank: int):
    """(model, its layers to shard one by one, this rank's (x, y), loss function, task)."""
    from ..tasks import CharGPT, Digits, _seeded_init
    if cfg.task == "gpt":
        task = CharGPT(n_layer=cfg.layers, n_embd=cfg.width, seed=cfg.seed)
        model = task.model()
        x, y = task.shards(world)[rank]
        return model, list(model.blocks), (x, y), lambda out, t: task.loss(out, t).mean(), task
    task = Digits(hidden=cfg.width, seed=cfg.seed)
    sizes = [task.features] + [cfg.width] * (cfg.layers - 1) + [task.classes]

    def build():
        mods = []
        for i in range(cfg.layers):
            mods.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i < cfg.layers - 1:
                mods.append(torch.nn.ReLU())
        return torch.nn.Sequential(*mods)
    model = _seeded_init(cfg.seed, build)
    layers = [m for m in model if isinstance(m, torch.nn.Linear)]
    return model, layers, task.shards(world)[rank], F.cross_entropy, task


def _shard(cfg: RunConfig, model, layers, device):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from .hsdp import hsdp_mesh
    world = dist.get_world_size()
    kw = {"mp_policy": MixedPrecisionPolicy(reduce_dtype=cfg.reduce_dtype)}
    if not cfg.reshard_after_forward:          # else FSDP2's default: the layers reshard, the root keeps its own
        kw["reshard_after_forward"] = False
    group = None
    if cfg.replicas > 1:
        if world % cfg.replicas:
            raise ValueError(f"replicas={cfg.replicas} does not divide the {world} ranks")
        if cfg.native_hsdp:
            from torch.distributed.device_mesh import init_device_mesh
            kw["mesh"] = init_device_mesh(device.type, (cfg.replicas, world // cfg.replicas),
                                          mesh_dim_names=("replicate", "shard"))
        else:
            kw["mesh"], group = hsdp_mesh(cfg.replicas, world // cfg.replicas, device.type)
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return group


class Trainer:
    """One rank's model, optimizer, data and milktea state for `cfg`, stepped one step at a
    time (`step()`): what `train` loops over, and what the bench interleaves."""

    def __init__(self, cfg: RunConfig):
        from ..distributed.link import EmulatedLink
        from . import comms
        from .state import compress
        self.cfg = cfg
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        from ..device import rank_device
        self.device = rank_device(dist.get_backend())   # this rank's GPU under NCCL, else the CPU
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)   # fully_shard's default mesh takes the current device
        model, layers, (self.x, self.y), self.loss_fn, self.task = _model_and_data(cfg, self.world, self.rank)
        self.model = model.to(self.device)
        group = _shard(cfg, self.model, layers, self.device)
        # what FSDP2 frees after forward and gathers again for backward: the layers, not the root's own
        self.regathered = sum(p.numel() for layer in layers for p in layer.parameters()) \
            if cfg.reshard_after_forward else 0
        self.state = None
        if cfg.install:
            link = EmulatedLink.gbit(cfg.link_gbit) if cfg.link_gbit is not None else None
            self.state = compress(self.model, cfg.compressor, error_feedback=cfg.error_feedback, weights=cfg.weights,
                                  min_size=cfg.min_size, link=link, replicate_group=group)
            if cfg.probe:
                comms.send_nothing(self.state)
        self.opt = (torch.optim.AdamW(self.model.parameters(), lr=cfg.lr) if cfg.optimizer == "adamw"
                    else torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9))
        self.done = 0
        if cfg.resume:
            from .checkpoint import load_checkpoint
            self.done = load_checkpoint(cfg.checkpoint, self.model, self.opt, self.state)["step"]
        self.gen = torch.Generator().manual_seed(cfg.seed * 1000 + self.rank)
        for _ in range(self.done * cfg.accumulate):        # the batches the saved run already drew
            torch.randint(len(self.y), (cfg.batch,), generator=self.gen)
        self.losses, self.times, self.memory = [], [], None

    def step(self) -> float:
        """One training step (`accumulate` micro-batches); returns the loss, mean over the ranks."""
        cfg, model = self.cfg, self.model
        t0 = time.perf_counter()
        total = torch.zeros((), device=self.device)
        for micro in range(cfg.accumulate):
            model.set_requires_gradient_sync(micro == cfg.accumulate - 1)
            idx = torch.randint(len(self.y), (cfg.batch,), generator=self.gen)
            loss = self.loss_fn(model(self.x[idx].to(self.device)), self.y[idx].to(self.device)) / cfg.accumulate
            loss.backward()
            total += loss.detach()
        self.opt.step()
        if self.state is not None:
            self.memory = self.state.memory(self.opt)          # the gradient shards still there
        self.opt.zero_grad()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.times.append(time.perf_counter() - t0)
        dist.all_reduce(total)
        self.losses.append(float(total) / self.world)
        self.done += 1
        if cfg.checkpoint and cfg.save_at == self.done and not cfg.resume:
            from .checkpoint import save_checkpoint
            save_checkpoint(cfg.checkpoint, model, self.opt, self.state, step=self.done)
        return self.losses[-1]

    def evaluate(self) -> float:
        """The held-out loss (every rank computes it, on the whole model)."""
        with torch.no_grad():
            if self.cfg.task == "gpt":
                return self.task.evaluate(self.model)["loss"]
            return float(F.cross_entropy(self.model(self.task.x_test.to(self.device)),
                                         self.task.y_test.to(self.device)))

    def result(self) -> dict:
        state = self.state
        out = {"rank": self.rank, "world": self.world, "losses": self.losses, "step_s": self.times,
               "traffic": list(state.stats.steps) if state is not None else [], "memory": self.memory,
               "state": repr(state), "ledger": state.ledger if state is not None else None,
               "params": sum(p.numel() for p in self.model.parameters()), "regathered": self.regathered}
        if self.cfg.return_params:
            out["shards"] = {n: p.to_local().detach().clone().cpu() for n, p in self.model.named_parameters()}
        if self.cfg.evaluate:
            out["eval_loss"] = self.evaluate()
        return out

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


def train(cfg: RunConfig) -> dict:
    """Train on this rank; returns its losses (mean over the ranks), step times, traffic
    per step (`StepTraffic`s), memory, and with `return_params` its weight shards."""
    t = Trainer(cfg)
    while t.done < cfg.steps:
        t.step()
    out = t.result()
    t.close()
    return out
