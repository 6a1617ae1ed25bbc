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

from milktea.checks import check_int
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

    def __post_init__(self):
        from milktea.tasks import TASKS
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose from {', '.join(TASKS)}")
        if self.scheme not in schemes.SCHEMES:
            raise ValueError(f"unknown scheme {self.scheme!r}; choose from {', '.join(schemes.SCHEMES)}")
        for name in ("steps", "batch", "powersgd_rank", "start_step"):
            check_int(getattr(self, name), name, 1)
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio}")
        if self.link_gbit is not None and not self.link_gbit > 0:
            raise ValueError(f"link_gbit must be > 0 (or None for no emulation), got {self.link_gbit}")


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


def _local_hook(state, bucket):  # no annotations: DDP checks them
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


class ComputeProbe:
    """The same model and data under DDP with a hook that communicates nothing: times
    forward (with zero_grad), backward (with DDP's bucketing) and optimizer step, the
    compute the cost model adds to the link time. Stepped between the schemes in a
    comparison, it sees the same load on the cores as they do."""

    def __init__(self, cfg: TrainConfig):
        from torch.nn.parallel import DistributedDataParallel as DDP
        from milktea.tasks import make_task
        self.device = device_for_rank()
        self.task = make_task(cfg.task, hidden=cfg.hidden, seed=cfg.seed)
        x, y = self.task.shard(dist.get_rank(), dist.get_world_size())
        net = self.task.model().to(self.device)
        self.model = DDP(net, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                         bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=True)
        self.model.register_comm_hook(None, _local_hook)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.data = _batches(x.to(self.device), y.to(self.device), cfg.batch, cfg.seed, dist.get_rank())
        self.history: list[dict] = []
        # error feedback's least memory traffic per step, timed beside the compute: a ledger
        # as large as the model, the gradient added into it, the gradient's buffer rewritten
        n = sum(p.numel() for p in net.parameters())
        self._ledger = torch.zeros(n, device=self.device)
        self._grad = torch.zeros(n, device=self.device)
        self.floor_history: list[float] = []

    def step(self) -> dict:
        xb, yb = next(self.data)
        t = [time.perf_counter()]
        self.opt.zero_grad(set_to_none=True)   # DDP re-points .grad at its bucket: no zeroing pass
        loss = self.task.loss(self.model(xb), yb).mean()
        for work in (lambda: None, loss.backward, self.opt.step):
            work()
            _sync(self.device)
            t.append(time.perf_counter())
        rec = {"forward_s": t[1] - t[0], "backward_s": t[2] - t[1], "optimizer_s": t[3] - t[2]}
        self.history.append(rec)
        t0 = time.perf_counter()
        self._ledger.add_(self._grad)
        self._grad.zero_()
        _sync(self.device)
        self.floor_history.append(time.perf_counter() - t0)
        return rec

    def median(self, skip: int = 2) -> dict:
        """Median of each phase over the steps after `skip` warm-up steps."""
        rows = self.history[skip:] or self.history
        return {k: median(r[k] for r in rows) for k in rows[0]}

    def floor(self, skip: int = 2) -> float:
        """Median seconds of error feedback's least memory work per step on this rank, with
        every rank doing the same at once: the ledger += the gradient (read two model-sized
        buffers, write one) and the gradient's buffer rewritten (where the mean lands). No
        error-feedback scheme's codec can take less on this machine, whatever it selects."""
        rows = self.floor_history[skip:] or self.floor_history
        return median(rows)


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
HELP = {
    "scheme": "how gradients cross the wire",
    "ratio": "share of entries Top-K / Random-K keep",
    "powersgd_rank": "rank of PowerSGD's factors",
    "batch": "examples per worker per step",
    "hidden": "MLP width (337000 gives ~25M parameters)",
    "link_gbit": "emulate a link of this many Gbit/s (default: no emulation)",
    "latency_us": "the emulated link's latency per message",
    "start_step": "steps sent dense before compression starts",
    "min_size": "tensors smaller than this stay dense",
    "bucket_cap_mb": "DDP's gradient bucket size",
}
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
        extra = {"choices": schemes.SCHEMES} if f.name == "scheme" else {}
        shown = "" if v is None else f" (default {v})"
        ap.add_argument(flag(f.name), dest=f.name, type=kind, default=v, help=HELP.get(f.name, "") + shown,
                        metavar="GBIT" if f.name == "link_gbit" else None, **extra)


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
                    help="local worker processes to start" + (" (not with torchrun)" if workers is None else ""))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help="stop, naming the rank, when one makes no progress for this long; also "
                         f"how long a collective waits for a peer (default {DEFAULT_TIMEOUT_S:g})")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m milktea.train", allow_abbrev=False,
                                 description="Train the digits classifier with DDP and one communication scheme.")
    add_config_arguments(ap)
    add_run_arguments(ap, workers=None)
    ap.add_argument("--jsonl", default=None, metavar="FILE", help="write one JSON line per step here (rank 0)")
    return ap


def launch_timeouts(timeout: float) -> dict:
    """launch() keywords for a --timeout: the stall check fires before a peer's collective
    times out, so that the report names the rank that stopped, not the one left waiting."""
    if not timeout > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {timeout}")
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
    a = build_parser().parse_args(argv if argv is not None else sys.argv[1:])
    cfg = config_from_arguments(a)
    timeouts = launch_timeouts(a.timeout)
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
        res = launch(train, a.workers or 2, args=(cfg,), **timeouts)
    except (WorkerError, TimeoutError) as e:
        print(e, file=sys.stderr)
        raise SystemExit(1) from None
    _print_summary(res, a.jsonl)


if __name__ == "__main__":
    main()
    if "RANK" in os.environ:   # under torchrun this process joined (and left) a process group
        end_process(0)         # a normal exit can abort in gloo's threads: see end_process
