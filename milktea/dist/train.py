"""The training entry point: digits classifier, DDP, one communication scheme.

Under torchrun (one node or many):
    torchrun --nproc-per-node 2 -m milktea.train --scheme topk --ratio 0.01 --steps 200
Without torchrun (starts local workers itself):
    python -m milktea.train --nproc 2 --scheme powersgd --link 1gbit
From Python:
    from milktea.dist.train import TrainConfig, train
    launch(train, 2, args=(TrainConfig(scheme="topk"),))     # rank 0's summary dict
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, fields

import torch
import torch.distributed as dist

from milktea.dist import schemes


@dataclass
class TrainConfig:
    scheme: str = "dense"          # see milktea.dist.schemes.SCHEMES
    ratio: float = 0.01            # Top-K / Random-K share kept
    powersgd_rank: int = 4
    steps: int = 100
    batch: int = 32                # per worker
    lr: float = 0.05
    momentum: float = 0.9
    hidden: int = 256              # digits MLP width (337_000 gives ~25M parameters)
    seed: int = 0
    link_gbit: float | None = None   # emulate a link of this many Gbit/s (None: as is)
    latency_us: float = 50.0
    start_step: int = 1
    min_size: int = 1024
    bucket_cap_mb: float = 25.0

    def __post_init__(self):
        if self.scheme not in schemes.SCHEMES:
            raise ValueError(f"unknown scheme {self.scheme!r}; choose from {', '.join(schemes.SCHEMES)}")
        for name in ("steps", "batch", "powersgd_rank", "start_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio}")
        if self.link_gbit is not None and not self.link_gbit > 0:
            raise ValueError(f"link_gbit must be > 0 (or None for no emulation), got {self.link_gbit}")


def device_for_rank() -> torch.device:
    """This rank's device: its own GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def emulated_link(cfg: TrainConfig):
    from milktea.dist.link import EmulatedLink
    return None if cfg.link_gbit is None else EmulatedLink.gbit(cfg.link_gbit, cfg.latency_us * 1e-6)


def _batches(x, y, batch, seed, rank):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    while True:
        idx = torch.randint(len(y), (batch,), generator=g)
        yield x[idx], y[idx]


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_compute(cfg: TrainConfig, steps: int = 5) -> dict:
    """Seconds of forward, backward and optimizer step without any communication (the
    compute the cost model adds to the link time). Run on every rank at once, so the
    ranks compete for the cores as they do in training."""
    from milktea.tasks import Digits
    device = device_for_rank()
    task = Digits(hidden=cfg.hidden, seed=cfg.seed)
    x, y = task.shard(dist.get_rank(), dist.get_world_size())
    model = task.model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    data = _batches(x.to(device), y.to(device), cfg.batch, cfg.seed, dist.get_rank())
    times = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    for _ in range(steps + 1):   # the first step warms up allocations
        xb, yb = next(data)
        opt.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        loss = task.loss(model(xb), yb).mean()
        _sync(device)
        t1 = time.perf_counter()
        loss.backward()
        _sync(device)
        t2 = time.perf_counter()
        opt.step()
        _sync(device)
        t3 = time.perf_counter()
        for k, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[k].append(dt)
    return {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in times.items()}


def train(cfg: TrainConfig | dict, model_link=None, on_step=None, link=None) -> dict:
    """Train on this rank (the process group must be initialised). Returns the summary,
    the same on every rank: per-step records (loss averaged over ranks), final held-out
    accuracy and loss, and the scheme's mean statistics.

    on_step(record) is called on every rank after each step; `link` overrides
    cfg.link_gbit with an EmulatedLink; `model_link` is the cost.Link the auto policy uses."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.tasks import Digits
    cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig(**cfg)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = device_for_rank()
    link = link if link is not None else emulated_link(cfg)
    task = Digits(hidden=cfg.hidden, seed=cfg.seed)
    x, y = task.shard(rank, world)
    net = task.model().to(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=True)
    handle = schemes.build(cfg.scheme, model, ratio=cfg.ratio, rank=cfg.powersgd_rank, link=link,
                           model_link=model_link, start_step=cfg.start_step, min_size=cfg.min_size)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    data = _batches(x.to(device), y.to(device), cfg.batch, cfg.seed, rank)
    records = []
    try:
        for step in range(cfg.steps):
            xb, yb = next(data)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            loss = task.loss(model(xb), yb).mean()
            loss.backward()
            opt.step()
            _sync(device)
            step_s = time.perf_counter() - t0
            loss_v = float(loss.detach())
            if loss_v != loss_v or loss_v in (float("inf"), float("-inf")):
                raise FloatingPointError(f"the loss became {loss_v} at step {step} with scheme "
                                         f"{cfg.scheme}; try a smaller --lr")
            st = handle.stats.history[-1] if len(handle.stats.history) > len(records) else None
            rec = {"scheme": cfg.scheme, "label": handle.label, "step": step, "loss": loss_v,
                   "step_s": step_s, **({k: v for k, v in st.to_dict().items() if k != "step"} if st else {})}
            records.append(rec)
            if on_step is not None:
                on_step(rec)
    finally:
        handle.close()
    # average the per-step loss over ranks, take the slowest rank's step time
    losses = torch.tensor([[r["loss"], r["step_s"]] for r in records], dtype=torch.float64)
    every = [torch.empty_like(losses) for _ in range(world)]
    dist.all_gather(every, losses)
    stacked = torch.stack(every)
    for i, r in enumerate(records):
        r["loss"] = float(stacked[:, i, 0].mean())
        r["step_s"] = float(stacked[:, i, 1].max())
    final = task.evaluate(net)
    return {"config": asdict(cfg), "scheme": cfg.scheme, "label": handle.label, "workers": world,
            "params": sum(p.numel() for p in net.parameters()), "final": final,
            "stats": handle.stats.mean(skip=min(cfg.start_step + 1, max(0, len(records) - 1))),
            "decisions": sorted(getattr(handle.state, "decisions", {}).values(), key=lambda d: d["bucket"]),
            "records": records}


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m milktea.train",
                                 description="Train the digits classifier with DDP and one communication scheme.")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        v = getattr(defaults, f.name)
        if f.name == "scheme":
            ap.add_argument(flag, default=v, choices=schemes.SCHEMES)
        elif f.name == "link_gbit":
            ap.add_argument("--link", dest="link_gbit", type=float, default=None,
                            help="emulate a link of this many Gbit/s (default: no emulation)")
        else:
            ap.add_argument(flag, type=type(v), default=v)
    ap.add_argument("--nproc", type=int, default=None,
                    help="start this many local workers (not needed under torchrun)")
    ap.add_argument("--log", default=None, help="write one JSON line per step here (rank 0)")
    return ap.parse_args(argv)


def _print_summary(res: dict, log: str | None) -> None:
    s = res["stats"]
    tail = res["records"][-min(10, len(res["records"])):]
    step_ms = 1e3 * sorted(r["step_s"] for r in tail)[len(tail) // 2]
    print(f"{res['label']}: {res['workers']} workers, {res['params']:,} parameters, "
          f"{len(res['records'])} steps, {step_ms:.1f} ms/step, "
          f"{s.get('payload_bytes', 0) / 1e6:.3f} MB sent per step per worker (R={s.get('ratio', float('nan')):.1f}x), "
          f"test accuracy {res['final']['accuracy']:.2%}, test loss {res['final']['loss']:.4f}")
    if log:
        with open(log, "w") as f:
            for r in res["records"]:
                f.write(json.dumps(r) + "\n")
        print(f"per-step records: {log}")


def main(argv: list[str] | None = None) -> None:
    a = _parse(argv if argv is not None else sys.argv[1:])
    cfg = TrainConfig(**{f.name: getattr(a, f.name) for f in fields(TrainConfig)})
    if "RANK" in os.environ and a.nproc is None:   # under torchrun: join its process group
        from milktea.dist.launch import pick_backend
        backend = "nccl" if pick_backend(int(os.environ.get("LOCAL_WORLD_SIZE", 1))) == "nccl" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend)
        try:
            res = train(cfg)
        finally:
            dist.destroy_process_group()
        if int(os.environ["RANK"]) == 0:
            _print_summary(res, a.log)
        return
    from milktea.dist.launch import WorkerError, launch
    try:
        res = launch(train, a.nproc or 2, args=(cfg,))
    except WorkerError as e:
        print(e, file=sys.stderr)
        raise SystemExit(1)
    _print_summary(res, a.log)


if __name__ == "__main__":
    main()
