"""Local steps on the tiny GPT: DiLoCo against DDP, compressed pseudo-gradients, and a
worker that goes dark, all on the same tokens.

    python -m milktea.bench local [--steps 3000] [--warm 500] [--json results/bench_local.json]

Four simulated workers start from the same parameters (`--warm` steps of DDP first, as
DiLoCo's paper starts from a pre-trained model) and see the same batches. Every run takes
the same inner steps: DDP exchanges its fp32 gradient every step, DiLoCo its
pseudo-gradient every H steps. Bytes per worker are the packets' real `len(encoded)`.
Then three targets are checked on the table and printed with [ok] / [MISSED].

What scales: time grows with the inner steps x workers x batch x the model's size
(`--steps`, `--batch`; the GPT is milktea.tasks.CharGPT's default, 246k parameters); the
byte ratios depend only on H, the compressor and the model's size, not on the steps.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from ..experiments import local as lx
from ..local import Outage
from ..tables import markdown_table
from ..tasks import CharGPT
from . import finish


def run(steps: int = 3000, warm: int = 500, workers: int = 4, batch: int = 8, seed: int = 0,
        sparse_steps: int = 10, progress: bool = False) -> dict:
    task = CharGPT(seed=seed)
    t0 = time.perf_counter()
    start = lx.warm_start(task, warm, workers=workers, batch=batch, seed=seed) if warm else None
    H = 100
    outer = steps // H
    out_from = outer // 2
    out_for = max(1, round(0.2 * outer))
    runs = {
        "ddp": lx.ddp(),
        "diloco H=100 int8": lx.diloco(H, lx.int8()),
        f"sparseloco H={sparse_steps} top2% 2-bit": lx.sparseloco(sparse_steps),
        f"diloco H=100 int8, worker 3 out {out_for}/{outer}": (lx.diloco(H, lx.int8()),
                                                                [Outage(workers - 1, out_from, out_from + out_for)]),
    }
    cmp = lx.compare(task, runs, workers=workers, steps=steps, batch=batch, seed=seed + 1, start=start,
                     progress=progress)
    names = list(runs)
    targets = [lx.check_bytes_and_loss(cmp.row(names[1]), 400, 0.02),
               lx.check_bytes_and_loss(cmp.row(names[2]), 1000, 0.03),
               lx.check_outage(cmp.row(names[3]), cmp.row(names[1]), 0.03)]
    rows = [{k: v for k, v in r.items() if k != "bytes per worker"} for r in cmp.rows]
    return dict(torch=torch.__version__, threads=torch.get_num_threads(), task=repr(task), workers=workers,
                steps=steps, warm=warm, batch=batch, seed=seed, wall_s=time.perf_counter() - t0, rows=rows,
                targets=[{"text": t.text, "ok": t.ok} for t in targets], table=markdown_table(cmp.table()),
                curves={n: dict(zip(h.eval_steps, h.evals["loss"])) for n, h in cmp.histories.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench local", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="inner steps per worker, a multiple of 100")
    ap.add_argument("--warm", type=int, default=500, help="DDP steps before the comparison (0: from scratch)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="windows of 32 characters per worker per step")
    ap.add_argument("--sparse-steps", type=int, default=10, help="H of the Top-K + error feedback run")
    ap.add_argument("--json", default=os.path.join("results", "bench_local.json"))
    a = ap.parse_args(argv)
    res = run(a.steps, a.warm, a.workers, a.batch, sparse_steps=a.sparse_steps, progress=True)
    print(f"torch {res['torch']}, {res['threads']} threads\n{res['task']}")
    print(f"{res['workers']} simulated workers x {res['batch']} windows, {res['steps']} inner steps each after "
          f"{res['warm']} steps of DDP, the same tokens for every run\n")
    print(res["table"] + "\n")
    finish(res, None, res["targets"])
    print(f"\n{res['wall_s']:.0f} s in all")
    return finish(res, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
