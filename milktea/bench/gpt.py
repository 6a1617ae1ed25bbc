"""Compression on a transformer: the character GPT in the simulator, every scheme for the
same steps, and the per-layer gradient statistics that explain the differences.

    python -m milktea.bench gpt [--workers 8] [--steps 30] [--json results/bench_gpt.json]

Dense, Top-1%+EF, int8, Sign+EF and PowerSGD r4+EF each train the same model from the same
weights on the same batches (SGD with momentum, the simulator's optimizer); the table gives
the held-out loss and perplexity after the last step and the wire ratio. A few minutes on
2 CPU cores with the defaults.
"""
from __future__ import annotations

import argparse
import os

import torch

from ..experiments.gpt import default_schemes, gradient_stats, runs_table, side_by_side
from ..tasks import CharGPT
from . import finish


def run(workers: int = 8, steps: int = 30, batch: int = 4, lr: float = 0.1, momentum: float = 0.9,
        ratio: float = 0.01, rank: int = 4, seed: int = 0, warmup: int = 20) -> dict:
    task = CharGPT(seed=seed)
    start = task.evaluate(task.model())
    rows = side_by_side(task, default_schemes(ratio, rank, momentum), workers=workers, steps=steps, batch=batch, lr=lr,
                        momentum=momentum, seed=seed, eval_every=max(1, steps // 4))
    stats = gradient_stats(task, workers=workers, batch=batch, rank=rank, warmup_steps=warmup, seed=seed)
    for r in rows:
        h = r.pop("history")
        r["ms per step"] = 1e3 * h.wall_time / max(1, h.steps)
        r["loss curve"] = dict(zip(h.eval_steps, h.evals["loss"]))
    return dict(torch=torch.__version__, threads=torch.get_num_threads(), task=repr(task), corpus=repr(task.corpus),
                workers=workers, steps=steps, batch=batch, lr=lr, warmup=warmup, momentum=momentum, start=start, runs=rows,
                layers=stats.rows, by_kind=stats.by_kind(), rank=rank, stats_table=stats.table())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench gpt", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4, help="windows of text per worker per step")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--warmup", type=int, default=20, help="dense steps before the per-layer statistics")
    ap.add_argument("--json", default=os.path.join("results", "bench_gpt.json"))
    a = ap.parse_args(argv)
    res = run(a.workers, a.steps, a.batch, a.lr, a.momentum, warmup=a.warmup)
    print(f"torch {res['torch']}, {res['threads']} threads\n{res['task']}\n{res['corpus']}")
    print(f"{res['workers']} simulated workers x {res['batch']} windows, {res['steps']} steps of SGD "
          f"(lr {res['lr']}, momentum {res['momentum']}); at the start: val loss {res['start']['loss']:.3f}\n")
    print(runs_table(res["runs"]) + "\n")
    print(f"Per-layer gradient after {res['warmup']} dense steps (one worker's {res['batch']} windows; "
          f"'summed': all {res['workers']} workers'):\n")
    print(res["stats_table"] + "\n")
    for kind, k in res["by_kind"].items():
        print(f"{kind:>12}: {k['tensors']:2d} tensors, {k['share of numbers']:6.1%} of the numbers, "
              f"{k['share of norm^2']:6.1%} of the squared norm")
    return finish(res, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
