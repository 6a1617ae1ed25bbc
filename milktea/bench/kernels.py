"""python -m milktea.bench kernels: every compressor's speed as a multiple of a plain copy.

Each kernel runs on the same float32 tensor as a copy into a preallocated buffer
(``dst.copy_(src)``), in the same run, so the ratio says how many "copies of the
gradient" a compressor costs on this machine, whatever its speed. Targets (on 2 CPU
threads, 25M entries) are printed beside the measurement.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from .. import kernels as K
from ..compressors import QSGD, Cast, Chain, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
from ..compressors.sparse import sparse_decode
from ..device import pick_device
from ..feedback import ErrorFeedback
from .timing import measure, table


def cases(x: torch.Tensor):
    """(name, function, target ratio or None, note) for one input tensor."""
    n = x.numel()
    k = max(1, n // 100)
    buf = torch.empty_like(x)
    resid = torch.zeros_like(x)
    topk, approx = TopK(0.01), TopK(0.01, approximate=True)
    q8, q4, sign = Quantize(8), Quantize(4), Sign()
    p8, p4, ps = q8.compress(x), q4.compress(x), sign.compress(x)
    ef = ErrorFeedback(TopK(0.01, approximate=True))
    count = sparse_decode(approx.compress(x))[0].numel()
    side = int(n ** 0.5)
    mat = x[: side * side].view(side, side)
    out = [
        ("copy (baseline)", lambda: buf.copy_(x), None, "dst.copy_(src), no allocation"),
        ("torch.topk 1% of |x|", lambda: torch.topk(x.abs(), k, sorted=False), None, "PyTorch's own"),
        ("TopK 1% exact", lambda: topk.compress(x), 10, "deterministic ties"),
        ("TopK 1% approximate", lambda: approx.compress(x), 5, f"kept {count} for k={k} ({100 * (count / k - 1):+.1f}%)"),
        ("error-feedback add", lambda: resid.add_(x), 2, "residual += grad"),
        ("EF step, TopK 1% approx", lambda: ef.compress(x), None, "add + select + cross out"),
        ("int8 quantize+pack", lambda: q8.compress(x), 2, "chunk 1024"),
        ("int4 quantize+pack", lambda: q4.compress(x), 2, "chunk 1024"),
        ("int8 dequantize", lambda: q8.decompress(p8, out=buf), 2, "into a reused buffer"),
        ("int4 dequantize", lambda: q4.decompress(p4, out=buf), 2, "into a reused buffer"),
        ("sign pack", lambda: sign.compress(x), 2, "1 bit + mean|x|"),
        ("sign unpack", lambda: sign.decompress(ps, out=buf), 2, "into a reused buffer"),
        ("RandomK 1%", lambda: RandomK(0.01).compress(x), None, "indices from a shared seed"),
        ("QSGD 4 levels", lambda: QSGD(4).compress(x), None, "stochastic, torch ops"),
        ("TernGrad", lambda: TernGrad().compress(x), None, "stochastic, torch ops"),
        ("fp16 cast", lambda: Cast(torch.float16).compress(x), None, ""),
        ("PowerSGD rank 4", lambda: PowerSGD(4).compress(mat), None, f"{side}x{side} matrix"),
        ("TopK 1% + int8", lambda: Chain(TopK(0.01, approximate=True), Quantize(8)).compress(x), None, ""),
    ]
    if K.USE_NUMBA and x.device.type == "cpu":
        def torch_path(fn):
            def run():
                K.USE_NUMBA = False
                try:
                    fn()
                finally:
                    K.USE_NUMBA = True
            return run
        out += [
            ("int8 quantize+pack, torch ops", torch_path(lambda: q8.compress(x)), None, "unfused, for contrast"),
            ("int8 dequantize, torch ops", torch_path(lambda: q8.decompress(p8, out=buf)), None, "unfused"),
            ("sign pack, torch ops", torch_path(lambda: sign.compress(x)), None, "unfused"),
        ]
    if n <= 2_000_000:
        out.insert(2, ("naive: full sort of |x|", lambda: torch.sort(x.abs(), descending=True).indices[:k],
                       None, "what Top-K avoids"))
    return out


def run(sizes=(1_000_000, 25_000_000), repeat=7, device=None, quiet=False):
    device = pick_device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    rows = []
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(0)).to(device)
        base = None
        for name, fn, target, note in cases(x):
            median, best = measure(fn, repeat=repeat, sync=sync)
            base = base or median
            ratio = median / base
            rows.append({"kernel": name, "n": n, "ms": round(1e3 * median, 2), "x copy": round(ratio, 2),
                         "target": f"<= {target}x" if target else "",
                         "ok": ("yes" if ratio <= target else "NO") if target else "",
                         "note": note, "device": str(device)})
            if not quiet:
                print(f"  {n:>10,}  {name:32s} {1e3 * median:9.2f} ms  {ratio:6.2f}x copy", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench kernels", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 25_000_000])
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch and numba (default 2)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--out", default="results/bench_kernels.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"kernels: torch {torch.__version__}, {args.threads} threads, numba "
          f"{'on' if K.USE_NUMBA else 'off'}, device {pick_device(args.device)}")
    rows = run(args.sizes, args.repeat, args.device)
    print()
    print(table(rows, ["kernel", "n", "ms", "x copy", "target", "ok", "note"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"threads": args.threads, "torch": torch.__version__,
                                          "numba": K.USE_NUMBA, "rows": rows}, indent=1))
    print(f"\nwrote {os.path.relpath(args.out)}")
    return 0
