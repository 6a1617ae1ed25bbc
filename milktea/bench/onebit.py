"""1-bit Adam beside Adam and Sign+EF SGD on digits, in the simulator.

    python -m milktea.bench onebit [--workers 4] [--steps 150] [--warmup 30]

Prints, per optimizer: held-out accuracy and loss, bytes each worker sent per step after
the warm-up, and in all (as packets: the compressed all-reduce's wire carries about
2(N-1)/N of them, as a ring all-reduce does for dense gradients).
"""
from __future__ import annotations

import argparse

from ..compressors import Sign
from ..experiments.quantization import onebit_adam
from ..simulate import simulate
from ..tasks import Digits
from .timing import table


def run(workers: int = 4, steps: int = 150, warmup: int = 30, lr: float = 0.01, hidden: int = 32) -> list[dict]:
    task = Digits(hidden=hidden)
    # Adam and 1-bit Adam: the same runs chapter 05 shows (experiments.quantization.onebit_adam)
    adams, _rows = onebit_adam(task, workers=workers, steps=steps, warmups=(warmup,), lr=lr, eval_every=steps,
                               device="cpu")
    base = dict(workers=workers, steps=steps, progress=False, device="cpu", eval_every=steps)
    sgds = [simulate(task, compressor=Sign(), lr=0.05, momentum=0.9, **base),
            simulate(task, lr=0.05, momentum=0.9, **base)]
    labels = ["Adam (dense all-reduce)", f"1-bit Adam (warm-up {warmup})", "Sign+EF SGD, momentum 0.9",
              "SGD (dense), momentum 0.9"]
    rows = []
    for label, h in zip(labels, adams + sgds):
        late = h.bytes_per_worker[warmup:]
        rows.append(dict(optimizer=label, accuracy=h.final("accuracy"), loss=h.final("loss"),
                         bytes_per_step_after_warmup=sum(late) / len(late),
                         mb_per_worker=sum(h.bytes_per_worker) / 1e6, dense_bytes=h.dense_bytes,
                         wall_s=h.wall_time))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench onebit", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args(argv)
    rows = run(args.workers, args.steps, args.warmup, args.lr)
    print(f"digits, {args.workers} workers, {args.steps} steps; a dense gradient is {rows[0]['dense_bytes']} bytes\n")
    print(table([dict(optimizer=r["optimizer"], accuracy=f"{r['accuracy']:.1%}", loss=f"{r['loss']:.3f}",
                      bytes_per_step=f"{r['bytes_per_step_after_warmup']:.0f}",
                      MB_per_worker=f"{r['mb_per_worker']:.3f}", wall_s=f"{r['wall_s']:.1f}") for r in rows],
                ["optimizer", "accuracy", "loss", "bytes_per_step", "MB_per_worker", "wall_s"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
