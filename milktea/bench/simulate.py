"""How fast is the simulator? N=64 workers on digits, dense and compressed.

    python -m milktea.bench simulate [--workers 64] [--steps 300] [--json results/bench_simulate.json]

Prints (1) one step's per-worker gradients computed by one batched call (vmap of grad)
beside 64 separate backward passes on the same batches, and (2) whole simulated runs,
each scheme run `--repeat` times in turn (the fastest kept). Ratios are measured side by
side in the same process.
"""
from __future__ import annotations

import argparse
import os

import torch
from torch.func import functional_call, grad, vmap

from ..simulate import simulate
from ..tasks import Digits
from .timing import measure, table
from . import finish


def gradient_step(task: Digits, workers: int, batch: int, repeat: int = 5) -> dict:
    """Seconds for all workers' gradients: one vmap call vs a Python loop of backward passes."""
    model = task.model()
    params = {n: p.detach() for n, p in model.named_parameters()}
    shards = task.shards(workers)
    batch = min(batch, *(len(y) for _, y in shards))    # equal batches, so they stack
    xb = torch.stack([x[:batch] for x, _ in shards])
    yb = torch.stack([y[:batch] for _, y in shards])

    def loss_of(p, x, y):
        return task.loss(functional_call(model, p, (x,)), y).mean()

    batched = vmap(grad(loss_of), in_dims=(None, 0, 0))

    def loop():
        out = []
        for w in range(workers):
            model.zero_grad()
            task.loss(model(xb[w]), yb[w]).mean().backward()
            out.append([p.grad.clone() for p in model.parameters()])
        return out

    g_vmap, g_loop = batched(params, xb, yb), loop()
    err = max((g_vmap[n][w] - g_loop[w][i]).abs().max().item()
              for w in range(workers) for i, n in enumerate(params))
    t_vmap = measure(lambda: batched(params, xb, yb), repeat)[1]
    t_loop = measure(loop, repeat)[1]
    return dict(workers=workers, batch=batch, vmap_s=t_vmap, loop_s=t_loop, speedup=t_loop / t_vmap,
                max_abs_diff=err)


def schemes():
    """(label, compressor, batched): dense, then Top-1%+EF, Sign+EF and int8+EF with all workers
    compressed in one call, and Top-1%+EF one call per worker (what the batched path saves)."""
    from ..compressors import Quantize, Sign, TopK
    return [("dense", None, True), ("top1%+EF", TopK(ratio=0.01), True), ("sign+EF", Sign(), True),
            ("int8+EF", Quantize(bits=8), True), ("top1%+EF per worker", TopK(ratio=0.01), False)]


def run(workers: int = 64, steps: int = 300, batch: int = 32, hidden: int = 32, repeat: int = 2) -> dict:
    task = Digits(hidden=hidden)
    grad_step = gradient_step(task, workers, batch)
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for label, comp, batched in schemes():
            h = simulate(task, comp, workers=workers, steps=steps, batch=batch, lr=0.1, progress=False,
                         eval_every=steps, device="cpu", batched=batched)
            if label not in best or h.wall_time < best[label]["wall_s"]:
                best[label] = dict(scheme=label, wall_s=h.wall_time, ms_per_step=1e3 * h.wall_time / h.steps,
                                   ratio=h.ratio, accuracy=h.final("accuracy"))
    runs = list(best.values())
    for r in runs:
        r["vs_dense"] = r["wall_s"] / runs[0]["wall_s"]
    return dict(torch=torch.__version__, threads=torch.get_num_threads(), task=repr(task), params=task.n_params(),
                workers=workers, steps=steps, batch=batch, repeat=repeat, gradient_step=grad_step, runs=runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench simulate", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default=os.path.join("results", "bench_simulate.json"))
    args = ap.parse_args(argv)
    res = run(args.workers, args.steps, args.batch, args.hidden, args.repeat)
    g = res["gradient_step"]
    print(f"torch {res['torch']}, {res['threads']} threads, {res['task']}, {res['params']} parameters\n")
    print(f"one step of {g['workers']} per-worker gradients (batch {g['batch']}):")
    print(f"  vmap(grad) {g['vmap_s'] * 1e3:.2f} ms   loop of backward() {g['loop_s'] * 1e3:.2f} ms   "
          f"speedup {g['speedup']:.1f}x   max |diff| {g['max_abs_diff']:.1e}\n")
    print(f"{res['workers']} workers, {res['steps']} steps, batch {res['batch']} (best of {res['repeat']}):")
    rows = [dict(scheme=r["scheme"], wall_s=f"{r['wall_s']:.2f}", ms_per_step=f"{r['ms_per_step']:.1f}",
                 vs_dense=f"{r['vs_dense']:.1f}x", ratio=f"{r['ratio']:.1f}", accuracy=f"{r['accuracy']:.1%}")
            for r in res["runs"]]
    print(table(rows, ["scheme", "wall_s", "ms_per_step", "vs_dense", "ratio", "accuracy"]))
    return finish(res, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
