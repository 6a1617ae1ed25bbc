"""The training entry point: digits classifier, DDP, one communication scheme.

Under torchrun (one node or many):
    torchrun --nproc-per-node 2 -m milktea.train --scheme topk --ratio 0.01 --steps 200
Without torchrun (starts local workers itself):
    python -m milktea.train --workers 2 --scheme powersgd --link 1
From Python:
    from milktea.distributed.train import TrainConfig, train
    launch(train, 2, args=(TrainConfig(scheme="topk"),))     # rank 0's summary dict
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, fields

import torch
import torch.distributed as dist

from milktea.checks import check_int, check_number, check_ratio
from milktea.distributed import schemes
from milktea.distributed.hang import WorkerHang, watch
from milktea.distributed.worker import end_process, progress
from milktea.timing import median


@dataclass
class TrainConfig:
    scheme: str = "dense"          # see milktea.distributed.schemes.SCHEMES
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
    task: str = "digits"           # see milktea.tasks.TASKS ("gpt": a small character-level transformer)

    def __post_init__(self):   # every field checked (and made a plain int/float) before a process starts
        from milktea.cli import unknown
        from milktea.tasks import TASKS
        if self.task not in TASKS:
            raise ValueError(unknown("task", self.task, TASKS))
        if self.scheme not in schemes.SCHEMES:
            raise ValueError(unknown("scheme", self.scheme, schemes.SCHEMES) +
                             " (a compressor of your own: schemes.register, or --import its module)")
        for name in ("steps", "batch", "powersgd_rank", "start_step", "hidden"):
            setattr(self, name, check_int(getattr(self, name), name, 1))
        self.seed, self.min_size = check_int(self.seed, "seed", 0), check_int(self.min_size, "min_size", 0)
        self.ratio = check_ratio(self.ratio)
        self.lr = check_number(self.lr, "lr", 0, open_low=True)
        self.momentum = check_number(self.momentum, "momentum", 0, 1, open_high=True)
        self.latency_us = check_number(self.latency_us, "latency_us", 0)
        self.bucket_cap_mb = check_number(self.bucket_cap_mb, "bucket_cap_mb", 0, open_low=True)
        if self.link_gbit is not None:
            self.link_gbit = check_number(self.link_gbit, "link_gbit (None: no emulation)", 0, open_low=True)


def device_for_rank() -> torch.device:
    """This rank's device (`milktea.device.rank_device`): its own GPU under NCCL, the CPU
    under gloo; MILKTEA_DEVICE, if set, must agree with the process group's backend."""
    from milktea.device import rank_device
    return rank_device(dist.get_backend() if dist.is_initialized() else None)


def emulated_link(cfg: TrainConfig):
    from milktea.distributed.link import EmulatedLink
    return None if cfg.link_gbit is None else EmulatedLink.gbit(cfg.link_gbit, cfg.latency_us * 1e-6)


def _batches(x, y, batch, seed, rank):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    while True:
        idx = torch.randint(len(y), (batch,), generator=g)
        yield x[idx], y[idx]


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Run:
    """One scheme training on this rank, one step at a time (see train())."""

    def __init__(self, cfg: TrainConfig | dict, model_link=None, link=None):
        from torch.nn.parallel import DistributedDataParallel as DDP
        from milktea.tasks import make_task
        self.cfg = cfg = cfg if isinstance(cfg, TrainConfig) else TrainConfig(**cfg)
        rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = device_for_rank()
        link = link if link is not None else emulated_link(cfg)
        self.task = make_task(cfg.task, hidden=cfg.hidden, seed=cfg.seed)
        x, y = self.task.shard(rank, self.world)
        self.net = self.task.model().to(self.device)
        self.model = DDP(self.net, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                         bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=True)
        self.handle = schemes.build(cfg.scheme, self.model, ratio=cfg.ratio, rank=cfg.powersgd_rank, link=link,
                                    model_link=model_link, start_step=cfg.start_step, min_size=cfg.min_size,
                                    momentum=cfg.momentum)
        # a momentum-corrected scheme keeps the momentum in its hook; the optimizer then has none
        momentum = 0.0 if schemes.corrects_momentum(cfg.scheme) else cfg.momentum
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=momentum)
        self.data = _batches(x.to(self.device), y.to(self.device), cfg.batch, cfg.seed, rank)
        self.records: list[dict] = []

    def step(self) -> dict:
        xb, yb = next(self.data)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)   # DDP re-points .grad at its bucket: no zeroing pass
        loss = self.task.loss(self.model(xb), yb).mean()
        _sync(self.device)
        t1 = time.perf_counter()
        loss.backward()   # with the hook's compression and communication, overlapped
        _sync(self.device)
        t2 = time.perf_counter()
        self.opt.step()
        _sync(self.device)
        step_s = time.perf_counter() - t0
        # forward and optimizer step timed inside the real step: what the cost model adds
        # to the link time needs no separate probe but for backward's compute
        phases = {"forward_s": t1 - t0, "backward_s": t2 - t1, "optimizer_s": t0 + step_s - t2}
        progress()   # under milktea's launcher: a rank whose steps stop is named as hung
        loss_v = float(loss.detach())
        if loss_v != loss_v or loss_v in (float("inf"), float("-inf")):
            raise FloatingPointError(f"the loss became {loss_v} at step {len(self.records)} with scheme "
                                     f"{self.cfg.scheme}; try a smaller --lr")
        hist = self.handle.stats.history
        st = hist[-1] if len(hist) > len(self.records) else None
        rec = {"scheme": self.cfg.scheme, "label": self.handle.label, "step": len(self.records),
               "loss": loss_v, "step_s": step_s, **phases,
               **({k: v for k, v in st.to_dict().items() if k != "step"} if st else {})}
        self.records.append(rec)
        return rec

    def close(self) -> None:
        self.handle.close()

    def finish(self) -> dict:
        """Stop the hook, average the losses over ranks (step time: the slowest rank's),
        evaluate on the held-out split; the same summary on every rank."""
        self.close()
        records = self.records
        # each the slowest rank's: a collective waits for the last rank to hand in its packet,
        # so the cost model prices a step with the slowest rank's codec time, not rank 0's
        timed = ("step_s", "forward_s", "backward_s", "optimizer_s", "compress_s", "decode_s")
        mine = torch.tensor([[r["loss"], *(r.get(k, 0.0) for k in timed)] for r in records], dtype=torch.float64)
        every = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(every, mine)
        stacked = torch.stack(every)
        for i, r in enumerate(records):
            r["loss"] = float(stacked[:, i, 0].mean())
            r.update({k: float(stacked[:, i, 1 + j].max()) for j, k in enumerate(timed) if k in r})
        stats = self.handle.stats
        return {"config": asdict(self.cfg), "scheme": self.cfg.scheme, "label": self.handle.label,
                "workers": self.world, "params": sum(p.numel() for p in self.net.parameters()),
                "final": self.task.evaluate(self.net),
                "stats": stats.mean(skip=min(self.cfg.start_step + 1, max(0, len(records) - 1))),
                "decisions": sorted(getattr(self.handle.state, "decisions", {}).values(),
                                    key=lambda d: d["bucket"]),
                "records": records}


def train(cfg: TrainConfig | dict, model_link=None, on_step=None, link=None) -> dict:
    """Train on this rank (the process group must be initialised). Returns the summary,
    the same on every rank: per-step records (loss averaged over ranks), final held-out
    accuracy and loss, and the scheme's mean statistics.

    on_step(record) is called on every rank after each step; `link` overrides
    cfg.link_gbit with an EmulatedLink; `model_link` is the cost.Link the auto policy uses."""
    run = Run(cfg, model_link, link)
    try:
        for _ in range(run.cfg.steps):
            rec = run.step()
            if on_step is not None:
                on_step(rec)
    finally:
        run.close()
    return run.finish()


# --- the command line, generated from TrainConfig's fields (train and compare share it) ---
FLAGS = {"link_gbit": "--link"}   # a field's flag where it is not --field-name
HELP = {   # each option's help ends with its one default, added by add_config_arguments
    "scheme": "how gradients cross the wire, one of: " + ", ".join(schemes.SCHEMES),
    "ratio": "share of entries Top-K / Random-K keep, in (0, 1]",
    "powersgd_rank": "rank of PowerSGD's factors",
    "steps": "training steps",
    "batch": "examples per worker per step",
    "lr": "SGD's learning rate",
    "momentum": "SGD's momentum (a momentum-corrected scheme keeps it in its hook)",
    "hidden": "MLP width (337000 gives ~25M parameters)",
    "seed": "seed of the weights and the batches",
    "link_gbit": "emulate a link of this many Gbit/s",
    "latency_us": "the emulated link's latency per message, in microseconds",
    "start_step": "steps sent dense before compression starts",
    "min_size": "tensors smaller than this stay dense",
    "bucket_cap_mb": "DDP's gradient bucket size, in MB",
    "task": "what to train: digits or gpt",
}
NONE_MEANS = {"link_gbit": "no emulation, the link as it is"}   # a default of None, in words
DEFAULT_TIMEOUT_S = 300.0


def flag(name: str) -> str:
    """The command-line flag of TrainConfig field `name`."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def add_config_arguments(ap: argparse.ArgumentParser, defaults: TrainConfig | None = None,
                         skip: tuple = ()) -> None:
    """One option per TrainConfig field (but those in `skip`), defaulting to `defaults`."""
    defaults = defaults or TrainConfig()
    for f in fields(TrainConfig):
        if f.name in skip:
            continue
        v = getattr(defaults, f.name)
        kind = float if v is None or isinstance(v, float) else type(v)
        shown = NONE_MEANS.get(f.name, "none") if v is None else f"{v:g}" if isinstance(v, float) else v
        # names (scheme, task) are checked by TrainConfig, after --import: with a "did you mean"
        ap.add_argument(flag(f.name), dest=f.name, type=kind, default=v,
                        help=f"{HELP.get(f.name, f.name.replace('_', ' '))} (default: {shown})",
                        metavar="GBIT" if f.name == "link_gbit" else None)


def config_from_arguments(a: argparse.Namespace, defaults: TrainConfig | None = None) -> TrainConfig:
    """The TrainConfig that parsed options `a` give (fields they lack: from `defaults`)."""
    from dataclasses import replace
    return replace(defaults or TrainConfig(),
                   **{f.name: getattr(a, f.name) for f in fields(TrainConfig) if hasattr(a, f.name)})


def add_run_arguments(ap: argparse.ArgumentParser, workers: int | None = 2) -> None:
    """The options of a run rather than of training: local workers and the hang timeout.
    Every flag here and in add_config_arguments is checked (tests/integration/test_launch_cli.py)
    never to be a prefix of one of torchrun's, which would make torchrun reject it."""
    ap.add_argument("--workers", type=int, default=workers,
                    help="local worker processes to start " + ("(default: 2; none under torchrun, which starts "
                                                               "its own)" if workers is None else f"(default: {workers})"))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help="stop, naming the rank, when one makes no progress for this long; also "
                         f"how long a collective waits for a peer (default: {DEFAULT_TIMEOUT_S:g})")


def build_parser() -> argparse.ArgumentParser:
    from milktea.cli import Parser, add_import_argument
    ap = Parser(prog="python -m milktea.train", allow_abbrev=False,
                description="Train the digits classifier with DDP and one communication scheme.")
    add_config_arguments(ap)
    add_run_arguments(ap, workers=None)
    ap.add_argument("--jsonl", default=None, metavar="FILE",
                    help="write one JSON line per step here, on rank 0 (default: none)")
    add_import_argument(ap)
    return ap


def check_run_arguments(a: argparse.Namespace) -> dict:
    """--workers and --timeout checked (ValueError/TypeError); launch()'s timeouts returned."""
    if a.workers is not None:
        check_int(a.workers, "--workers", 1)
    return launch_timeouts(a.timeout)


def train_registered(cfg: TrainConfig, registered: dict) -> dict:
    """train() in a worker process that first knows the schemes registered in its parent."""
    schemes.adopt(registered)
    return train(cfg)


def launch_timeouts(timeout: float) -> dict:
    """launch() keywords for a --timeout: the stall check fires before a peer's collective
    times out, so that the report names the rank that stopped, not the one left waiting."""
    if not timeout > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {timeout:g}")
    return {"stall_timeout": timeout, "collective_timeout": 2 * timeout + 30}


def _print_summary(res: dict, log: str | None) -> None:
    s = res["stats"]
    tail = res["records"][-min(10, len(res["records"])):]
    step_ms = 1e3 * median(r["step_s"] for r in tail)
    print(f"{res['label']}: {res['workers']} workers, {res['params']:,} parameters, "
          f"{len(res['records'])} steps, {step_ms:.1f} ms/step, "
          f"{s.get('payload_bytes', 0) / 1e6:.3f} MB sent per step per worker (R={s.get('ratio', float('nan')):.1f}x), "
          f"test accuracy {res['final']['accuracy']:.2%}, test loss {res['final']['loss']:.4f}"
          + (f", perplexity {res['final']['perplexity']:.2f}" if "perplexity" in res["final"] else ""))
    if log:
        with open(log, "w") as f:
            for r in res["records"]:
                f.write(json.dumps(r) + "\n")
        print(f"per-step records: {log}")


def main(argv: list[str] | None = None) -> None:
    from milktea.cli import fail, import_modules
    ap = build_parser()
    a = ap.parse_args(argv if argv is not None else sys.argv[1:])
    try:                      # every setting checked here, in one line each, before a process starts
        import_modules(a.imports)
        cfg = config_from_arguments(a)
        timeouts = check_run_arguments(a)
    except (TypeError, ValueError) as e:
        fail(ap.prog, e)
    if "RANK" in os.environ and a.workers is None:   # under torchrun: join its process group
        from milktea.device import backend_for, rank_device
        device = rank_device()
        backend = backend_for(device)
        if backend == "nccl":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout))
        try:
            with watch():        # a peer that stops is named when our collective times out
                res = train(cfg)
        except WorkerHang as e:
            print(f"milktea.train, {e}", file=sys.stderr)
            end_process(1)       # the peer that stopped will never leave the group with us
        finally:
            dist.destroy_process_group()
        if int(os.environ["RANK"]) == 0:
            _print_summary(res, a.jsonl)
        return
    from milktea.distributed.launch import WorkerError, launch
    try:
        res = launch(train_registered, a.workers or 2, args=(cfg, schemes.registered([cfg.scheme])), **timeouts)
    except (WorkerError, TimeoutError) as e:
        print(e, file=sys.stderr)
        raise SystemExit(1) from None
    _print_summary(res, a.jsonl)


if __name__ == "__main__":
    main()
    if "RANK" in os.environ:   # under torchrun this process joined (and left) a process group
        end_process(0)         # a normal exit can abort in gloo's threads: see end_process
