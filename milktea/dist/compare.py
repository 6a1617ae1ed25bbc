"""`python -m milktea compare`: one model, one link, every way of sending the gradient.

    from milktea.dist.compare import compare
    result = compare(link_gbit=1.0, steps=20)    # 2 workers, emulated 1 Gbit/s link
    print(result.table())
    result.save("results/compare")               # JSON Lines, summary JSON, plots

Each rank first calibrates the cost model on the link in use (dense all-reduces of a
few sizes) and times its compute alone; then every scheme trains the same model from
the same weights for the same steps. The table gives the measured step time (median
after warm-up), the speedup over dense, bytes per step, the cost model's prediction
for the collectives really issued, and the held-out accuracy and loss at the end.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import traceback

import torch.distributed as dist

from milktea import cost
from milktea.dist import schemes
from milktea.dist.launch import launch, report
from milktea.dist.report import Comparison, predict_step

# schemes that PyTorch itself refuses or breaks in some set-ups: a failure is reported, not raised
OPTIONAL = ("torch-bf16", "torch-batched-powersgd")


def _worker(cfg: dict, names: list[str], link_gbit, latency_us: float, calibrate_sizes, profile_steps: int):
    from milktea.dist.calibrate import calibrate_link
    from milktea.dist.link import EmulatedLink
    from milktea.dist.train import TrainConfig, device_for_rank, profile_compute, train
    rank = dist.get_rank()
    emulated = EmulatedLink.gbit(link_gbit, latency_us * 1e-6) if link_gbit else None
    model_link = calibrate_link(calibrate_sizes, emulated=emulated, device=device_for_rank())
    base = TrainConfig(**cfg)
    compute = profile_compute(base, profile_steps)
    results = []
    for name in names:
        run_cfg = dataclasses.replace(base, scheme=name)
        if rank == 0:
            report(("start", name, schemes.label(name, base.ratio, base.powersgd_rank), base.steps))
        on_step = (lambda rec: report(("step", rec))) if rank == 0 else None
        try:
            res = train(run_cfg, model_link=model_link, on_step=on_step, link=emulated)
        except Exception as e:  # noqa: BLE001
            if name not in OPTIONAL:
                raise
            last = traceback.extract_tb(e.__traceback__)[-1]
            res = {"scheme": name, "label": schemes.label(name, base.ratio, base.powersgd_rank),
                   "error": f"{type(e).__name__} {str(e)[:200]} (in {last.name}, "
                            f"{last.filename.split('site-packages/')[-1]}:{last.lineno})"}
            dist.barrier()
        if rank == 0:
            report(("done", name))
        results.append(res)
    return {"model_link": (model_link.bandwidth, model_link.latency), "compute": compute,
            "results": results, "backend": dist.get_backend()}


def compare(names=schemes.COMPARE_DEFAULT, *, workers: int = 2, link_gbit: float | None = 1.0,
            latency_us: float = 50.0, netns_gbit: float | None = None, steps: int = 20,
            hidden: int = 256, batch: int = 32, lr: float = 0.05, momentum: float = 0.9, ratio: float = 0.01,
            powersgd_rank: int = 4, seed: int = 0, bucket_cap_mb: float = 25.0,
            calibrate_sizes=(4 << 10, 64 << 10, 1 << 20, 8 << 20), profile_steps: int = 3,
            progress: bool = True, timeout: float | None = None) -> Comparison:
    """Train with every scheme in `names` on `workers` local ranks; return a Comparison.

    link_gbit: emulated link speed (None: the real link as it is, e.g. loopback).
    netns_gbit: instead, a real link shaped by tc between network namespaces (root only).
    """
    names = list(names)
    for n in names:
        if n not in schemes.SCHEMES:
            raise ValueError(f"unknown scheme {n!r}; choose from {', '.join(schemes.SCHEMES)}")
    if netns_gbit is not None and link_gbit is not None:
        raise ValueError("choose link_gbit (emulated) or netns_gbit (shaped namespaces), not both")
    cfg = dict(steps=steps, hidden=hidden, batch=batch, lr=lr, momentum=momentum, ratio=ratio,
               powersgd_rank=powersgd_rank,
               seed=seed, bucket_cap_mb=bucket_cap_mb)
    from milktea.dist.train import TrainConfig
    TrainConfig(**cfg)   # check the settings here, before any worker starts
    bars = _Progress(progress)
    args = (cfg, names, link_gbit, latency_us, list(calibrate_sizes), profile_steps)
    try:
        if netns_gbit is not None:
            from milktea.dist.netns import NetnsLink
            with NetnsLink(workers, rate_bits=netns_gbit * 1e9) as net:
                out = launch(_worker, workers, args, on_message=bars, netns=net, timeout=timeout)
            where = f"{netns_gbit:g} Gbit/s tc-shaped veth link between network namespaces"
        else:
            out = launch(_worker, workers, args, on_message=bars, timeout=timeout)
            where = (f"emulated {link_gbit:g} Gbit/s link, {latency_us:g} us latency" if link_gbit
                     else "the real link as it is (loopback)")
    finally:
        bars.close()
    model_link = cost.Link(*out["model_link"])
    for res in out["results"]:
        for rec in res.get("records", []):
            rec["predicted_s"] = predict_step(out["compute"], rec, model_link, workers)
    return Comparison(out["results"], model_link, out["compute"], where, workers, out["backend"], cfg)


class _Progress:
    """tqdm bars in the caller's process (notebook or terminal), fed by rank 0."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __call__(self, rank, msg):
        if not self.enabled:
            return
        from tqdm.auto import tqdm
        if msg[0] == "start":
            self.close()
            self.bar = tqdm(total=msg[3], desc=f"{msg[2]:<34.34}", leave=True, unit="step")
        elif msg[0] == "step" and self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{msg[1]['loss']:.3f}", ms=f"{1e3 * msg[1]['step_s']:.0f}")
        elif msg[0] == "done":
            self.close()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m milktea compare", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default=",".join(schemes.COMPARE_DEFAULT),
                    help=f"comma-separated, from: {', '.join(schemes.SCHEMES)}")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--link", type=float, default=1.0, help="emulated link in Gbit/s (default 1)")
    ap.add_argument("--latency-us", type=float, default=50.0)
    ap.add_argument("--loopback", action="store_true", help="no emulation: the real (fast) link")
    ap.add_argument("--netns", type=float, default=None, metavar="GBIT",
                    help="a real tc-shaped link of GBIT Gbit/s between network namespaces (root)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256, help="MLP width; 337000 gives ~25M parameters")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--ratio", type=float, default=0.01)
    ap.add_argument("--powersgd-rank", type=int, default=4)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--out", default="results/compare", help="folder for results.jsonl, summary.json, plots")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    link = None if (a.loopback or a.netns is not None) else a.link
    res = compare([s.strip() for s in a.schemes.split(",") if s.strip()], workers=a.workers,
                  link_gbit=link, latency_us=a.latency_us, netns_gbit=a.netns, steps=a.steps,
                  hidden=a.hidden, batch=a.batch, lr=a.lr, momentum=a.momentum, ratio=a.ratio, powersgd_rank=a.powersgd_rank,
                  bucket_cap_mb=a.bucket_cap_mb, progress=not a.no_progress)
    print(res.table())
    paths = res.save(a.out, plots=not a.no_plots)
    print("wrote " + ", ".join(paths), file=sys.stderr)


if __name__ == "__main__":
    main()
