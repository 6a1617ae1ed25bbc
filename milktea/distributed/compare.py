"""`python -m milktea compare`: one model, one link, every way of sending the gradient.

    from milktea.distributed.compare import compare
    from milktea.distributed.train import TrainConfig
    result = compare(config=TrainConfig(steps=20, link_gbit=1.0))   # 2 workers, emulated 1 Gbit/s
    result = compare(steps=20, link_gbit=1.0)                         # the same, as keywords
    print(result.table())
    result.save("results/compare")               # JSON Lines, summary JSON, plots

Each rank first calibrates the cost model on the link in use (dense all-reduces of a
few sizes) and times its compute alone; then every scheme trains the same model from
the same weights for the same steps. The table gives the measured step time (median
after warm-up), the speedup over dense, bytes per step, the cost model's prediction
for the collectives really issued, and the held-out accuracy and loss at the end.
"""
from __future__ import annotations

import dataclasses
import traceback

import torch.distributed as dist

from milktea import cost
from milktea.checks import check_int
from milktea.i18n import _
from milktea.distributed import schemes
from milktea.distributed.launch import launch
from milktea.distributed.worker import report
from milktea.distributed.report import Comparison, predict_step

# schemes that PyTorch itself refuses or breaks in some set-ups: a failure is reported, not raised
OPTIONAL = ("torch-bf16", "torch-batched-powersgd")


def step_compute(rec: dict, probe: dict) -> dict:
    """The compute of one step for the cost model: its own forward and optimizer step (timed
    inside it) and backward's compute from the probe's median over all rounds (a real
    step's backward includes the link; one round's probe alone is too noisy to trust)."""
    if "forward_s" not in rec:
        return probe
    return {"forward_s": rec["forward_s"], "backward_s": probe["backward_s"], "optimizer_s": rec["optimizer_s"]}


def _warm_up(names, cfg) -> None:
    """Run each compressor once on a 1M tensor: its compiled kernels load now, so that
    the first scheme to use them is not charged for it."""
    import torch
    x = torch.randn(1 << 20)
    for name in names:
        if name in schemes.MILKTEA:
            c = schemes.MILKTEA[name][1](cfg.ratio, cfg.powersgd_rank)
            if c is not None:
                p = c.compress(x.view(1024, 1024))    # a matrix: every protocol takes one
                c.aggregate([p, p])


def _error(name, base, e) -> dict:
    last = traceback.extract_tb(e.__traceback__)[-1]
    return {"scheme": name, "label": schemes.label(name, base.ratio, base.powersgd_rank),
            "error": f"{type(e).__name__} {str(e)[:200]} (in {last.name}, "
                     f"{last.filename.split('site-packages/')[-1]}:{last.lineno})"}


#: Bytes per parameter one scheme's model holds in one rank while the schemes step in turns:
#: weights, gradient buckets, ledger, packets, decode and PowerSGD temporaries. Measured on
#: the 25M-parameter bench model: up to 44 (4 bytes a copy was once assumed, and twelve
#: schemes in turns outgrew a 24 GB machine).
BYTES_PER_PARAM = 48


def footprint(n_schemes: int, params: int, workers: int) -> int:
    """Bytes that stepping `n_schemes` in turns holds, on all local workers together.

    >>> footprint(12, 25_000_000, 2) / 1e9    # the distributed bench's 25M-parameter model
    28.8
    """
    return n_schemes * params * BYTES_PER_PARAM * workers


def fits_in_memory(n_schemes: int, params: int, workers: int) -> bool:
    """Whether every scheme's model, and one more for headroom, fits in half the memory
    available now (4 GB where that is unknown)."""
    avail = _available()
    if avail is None:
        return footprint(n_schemes, params, workers) < 4e9
    return footprint(n_schemes + 1, params, workers) < 0.5 * avail


def _available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return None


def _worker(cfg: dict, names: list[str], calibrate_sizes, interleave: bool, extra: dict | None = None):
    from milktea.distributed.calibrate import calibrate_link
    from milktea.distributed.probe import ComputeProbe
    from milktea.distributed.train import Run, TrainConfig, device_for_rank, emulated_link
    rank = dist.get_rank()
    schemes.adopt(extra or {})      # schemes registered in the parent (a user's own compressor)
    base = TrainConfig(**cfg)
    emulated = emulated_link(base)
    model_link = calibrate_link(calibrate_sizes, emulated=emulated, device=device_for_rank())
    _warm_up(names, base)
    probe = ComputeProbe(base)
    done, failed = {}, {}

    def start(name):
        try:
            return Run(dataclasses.replace(base, scheme=name), model_link, link=emulated)
        except Exception as e:  # noqa: BLE001 - PyTorch may refuse one of its own hooks here
            if name not in OPTIONAL:
                raise
            failed[name] = _error(name, base, e)
            return None

    def step(name, run, compute):
        try:
            rec = run.step()
        except Exception as e:  # noqa: BLE001
            if name not in OPTIONAL:
                raise
            failed[name] = _error(name, base, e)
            run.close()
            dist.barrier()
            return False
        rec["compute"] = compute
        if rank == 0:
            report(("step", rec))
        return True

    # interleaved: step t of every scheme runs in the same round, beside a compute-only
    # step, so all of them see the same load on the machine; else one scheme after another
    groups = [names] if interleave else [[n] for n in names]
    if rank == 0:
        report(("start", "all schemes" if interleave else "", base.steps * len(names)))
    for group in groups:
        runs = {n: r for n in group if (r := start(n)) is not None}
        for t in range(base.steps):
            # the compute probe first (its time prices this round), then the schemes, starting
            # one further each round so that none always runs right after the same neighbour
            compute = probe.step()
            order = list(runs)
            for name in order[t % max(1, len(order)):] + order[:t % max(1, len(order))]:
                if not step(name, runs[name], compute):
                    del runs[name]
        done.update({n: r.finish() for n, r in runs.items()})
    results = [done.get(n) or failed[n] for n in names]
    if rank == 0:
        report(("done",))
    return {"model_link": (model_link.bandwidth, model_link.latency), "compute": probe.median(),
            "floor_s": probe.floor(), "results": results, "backend": dist.get_backend(), "interleaved": interleave}


def ready(pool, names=schemes.COMPARE_DEFAULT):
    """Start `pool`'s ranks and load on them what a comparison of `names` loads first (torch's
    DDP, which imports its compiler on first use, and each codec's compiled kernels); return
    the pool. A notebook calls it in an earlier cell, so that `compare(names, ranks=pool)`
    spends its time training, not starting up:

        ranks = ready(Pool(2), ["dense", "topk"])          # doctest: +SKIP
        result = compare(["dense", "topk"], ranks=ranks)   # doctest: +SKIP
    """
    pool.run(_ready, (check_names(names),))
    return pool


def _ready(names) -> None:
    import torch._dynamo  # noqa: F401 - what DDP's constructor imports (seconds on a busy core)
    from milktea.distributed.train import TrainConfig
    _warm_up(names, TrainConfig())


def check_names(names) -> list[str]:
    """The scheme names, each known (with a "did you mean" otherwise), once, at least one."""
    from milktea.cli import unknown
    names = list(names)
    for n in names:
        if n not in schemes.SCHEMES:
            raise ValueError(unknown("scheme", n, schemes.SCHEMES) +
                             " (a compressor of your own: schemes.register, or --import its module)")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"give each scheme once (and at least one), got {names}")
    return names


def compare(names=schemes.COMPARE_DEFAULT, config=None, *, workers: int = 2, netns_gbit: float | None = None,
            calibrate_sizes=None, interleave: bool | None = None, progress: bool = True,
            on_message=None, timeout: float | None = None, stall_timeout: float | None = None,
            ranks=None, **settings) -> Comparison:
    """Train with every scheme in `names` on `workers` local ranks; return a Comparison.

    config: a milktea.distributed.train.TrainConfig with the training settings (its
    `scheme` is ignored); `settings` are TrainConfig fields as keywords, applied on top
    (steps=20, hidden=256, lr=..., link_gbit=1.0, ...). Without a config the link is an
    emulated 1 Gbit/s one (link_gbit=None: the real link as it is, e.g. loopback).
    netns_gbit: instead, a real link shaped by tc between network namespaces (root only).
    task: what to train, "digits" (an MLP `hidden` wide) or "gpt" (a small character-level
    transformer; see milktea.tasks.make_task).
    interleave: step the schemes in turns (fair on a busy machine; default: when all the
    models fit in half the free memory), else one scheme after another.
    on_message: called as on_message(rank, message) with what rank 0 reports while it trains
    (("start", ...), ("step", record), ("done",)): e.g. a live dashboard.
    calibrate_sizes: the all-reduce sizes (bytes) the cost model is fitted on (default: see
    milktea.distributed.calibrate.calibrate_link).
    timeout: seconds for the whole run; stall_timeout: stop, naming the rank, when one makes
    no progress for this long (see milktea.distributed.launch.launch).
    ranks: a `milktea.distributed.Pool` of `workers` ranks that are already up (see `ready`):
    the run skips starting processes and loading torch's DDP and the codecs; None starts
    fresh ones.
    """
    from milktea.distributed.train import TrainConfig
    if config is None:
        config = TrainConfig(steps=20, link_gbit=1.0)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    config = dataclasses.replace(config, **settings)   # checks the settings here, before any worker starts
    names = check_names(names)
    check_int(workers, "workers", 1)
    if ranks is not None and (netns_gbit is not None or getattr(ranks, "nprocs", None) != workers):
        raise ValueError(f"ranks must be a Pool of workers={workers} ranks (and no netns_gbit), got {ranks!r}")
    if netns_gbit is not None and config.link_gbit is not None:
        raise ValueError("choose link_gbit (emulated) or netns_gbit (shaped namespaces), not both")
    cfg = dataclasses.asdict(config)
    hidden, link_gbit, latency_us = config.hidden, config.link_gbit, config.latency_us
    if interleave is None:
        from milktea.tasks import make_task
        interleave = fits_in_memory(len(names), make_task(config.task, hidden=hidden).n_params(), workers)
    progress_bars = _Progress(progress)

    def bars(rank, msg):
        progress_bars(rank, msg)
        if on_message is not None:
            on_message(rank, msg)
    args = (cfg, names, None if calibrate_sizes is None else list(calibrate_sizes), interleave,
            schemes.registered(names))
    from milktea.distributed.train import launch_timeouts
    limits = dict(timeout=timeout, **(launch_timeouts(stall_timeout) if stall_timeout else {}))
    try:
        if netns_gbit is not None:
            from milktea.distributed.netns import NetnsLink
            with NetnsLink(workers, rate_bits=netns_gbit * 1e9) as net:
                out = launch(_worker, workers, args, on_message=bars, netns=net, **limits)
            where = _("{gbit:g} Gbit/s tc-shaped veth link between network namespaces").format(gbit=netns_gbit)
        else:
            if ranks is not None:
                out = ranks.run(_worker, args, on_message=bars, timeout=timeout, stall_timeout=stall_timeout)
            else:
                out = launch(_worker, workers, args, on_message=bars, **limits)
            where = (_("emulated {gbit:g} Gbit/s link, {us:g} us latency").format(gbit=link_gbit, us=latency_us)
                     if link_gbit else _("the real link as it is (loopback)"))
    finally:
        progress_bars.close()
    model_link = cost.Link(*out["model_link"])
    for res in out["results"]:
        for rec in res.get("records", []):
            rec["predicted_s"] = predict_step(step_compute(rec, out["compute"]), rec, model_link, workers)
    where += _(", ") + (_("schemes interleaved step by step") if out["interleaved"] else _("one scheme after another"))
    return Comparison(out["results"], model_link, out["compute"], where, workers, out["backend"], cfg,
                      floor_s=out["floor_s"])


class _Progress:
    """A tqdm bar in the caller's process (notebook or terminal), fed by rank 0."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __call__(self, rank, msg):
        if not self.enabled:
            return
        from tqdm.auto import tqdm
        if msg[0] == "start":
            self.close()
            self.bar = tqdm(total=msg[2], desc="compare", unit="step")
        elif msg[0] == "step" and self.bar is not None:
            rec = msg[1]
            self.bar.update(1)
            self.bar.set_postfix_str(f"{rec['label'][:28]}: step {rec['step']}, loss {rec['loss']:.3f}, "
                                     f"{1e3 * rec['step_s']:.0f} ms")
        elif msg[0] == "done":
            self.close()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


COMPARE_DEFAULTS = dict(steps=20, link_gbit=1.0)   # compare's defaults where they differ from train's
