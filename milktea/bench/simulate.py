"""How fast is the simulator? N=64 workers on digits, dense and compressed.

    python -m milktea.bench.simulate [--workers 64] [--steps 300] [--json results/bench_simulate.json]

Prints (1) one step's per-worker gradients computed by one batched call (vmap of grad)
beside 64 separate backward passes on the same batches, and (2) whole simulated runs.
Ratios are measured side by side in the same process.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch.func import functional_call, grad, vmap

from ..simulate import simulate
from ..tasks import Digits


def _best(fn, repeat: int) -> float:
    fn()                                        # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def gradient_step(task: Digits, workers: int, batch: int, repeat: int = 5) -> dict:
    """Seconds for all workers' gradients: one vmap call vs a Python loop of backward passes."""
    model = task.model()
    params = {n: p.detach() for n, p in model.named_parameters()}
    shards = task.shards(workers)
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
    t_vmap, t_loop = _best(lambda: batched(params, xb, yb), repeat), _best(loop, repeat)
    return dict(workers=workers, batch=batch, vmap_s=t_vmap, loop_s=t_loop, speedup=t_loop / t_vmap,
                max_abs_diff=err)


def schemes():
    """Dense plus whatever compressors this install provides."""
    out = [("dense", None)]
    try:
        from ..compressors import Quantize, TopK
    except ImportError:
        return out
    return out + [("top1%+EF", TopK(ratio=0.01)), ("int8+EF", Quantize(bits=8))]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench.simulate", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--json", default=os.path.join("results", "bench_simulate.json"))
    args = ap.parse_args(argv)
    task = Digits(hidden=args.hidden)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {task!r}, "
          f"{task.n_params()} parameters\n")

    g = gradient_step(task, args.workers, min(args.batch, 22))
    print(f"one step of {g['workers']} per-worker gradients (batch {g['batch']}):")
    print(f"  vmap(grad): {g['vmap_s'] * 1e3:8.2f} ms   loop of backward(): {g['loop_s'] * 1e3:8.2f} ms   "
          f"speedup {g['speedup']:.1f}x   max |diff| {g['max_abs_diff']:.1e}\n")

    runs = []
    print(f"{'scheme':<10} {'workers':>7} {'steps':>6} {'wall s':>8} {'ms/step':>8} {'vs dense':>9} "
          f"{'ratio R':>8} {'accuracy':>9}")
    for label, comp in schemes():
        h = simulate(task, comp, workers=args.workers, steps=args.steps, batch=args.batch, lr=0.1,
                     progress=False, eval_every=args.steps, device="cpu")
        runs.append(dict(scheme=label, wall_s=h.wall_time, ms_per_step=1e3 * h.wall_time / h.steps,
                         ratio=h.ratio, accuracy=h.final("accuracy")))
        r = runs[-1]
        print(f"{label:<10} {args.workers:>7} {args.steps:>6} {r['wall_s']:>8.2f} {r['ms_per_step']:>8.2f} "
              f"{r['wall_s'] / runs[0]['wall_s']:>8.1f}x {r['ratio']:>8.1f} {r['accuracy']:>9.1%}")
    result = dict(torch=torch.__version__, threads=torch.get_num_threads(), gradient_step=g, runs=runs,
                  workers=args.workers, steps=args.steps, batch=args.batch, hidden=args.hidden)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"\nwrote {args.json}")
    return result


if __name__ == "__main__":
    main()
