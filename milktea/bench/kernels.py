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
from ..compressors import QSGD, Cast, Chain, Identity, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
from ..compressors.sparse import sparse_decode
from ..device import pick_device
from ..feedback import ErrorFeedback
from .timing import measure, table


#: every codec's compress and decompress, at most this many copies of the gradient
CODEC_TARGET = 3


def codec_cases(x: torch.Tensor, buf: torch.Tensor):
    """(name, function, target, note): compress, then decompress into a reused buffer, of
    each codec of the library (PowerSGD is held to PyTorch's own hook instead, in the DDP
    comparison: python -m milktea.distributed.bench)."""
    n = x.numel()
    side = int(n ** 0.5)
    mat = x[: side * side].view(side, side)
    codecs = [
        ("dense", Identity(), x, ""),
        ("fp16 cast", Cast(torch.float16), x, "2 bytes per entry"),
        ("bf16 cast", Cast(torch.bfloat16), x, "2 bytes per entry"),
        ("TopK 1% exact", TopK(0.01), x, "deterministic ties"),
        ("TopK 1% approximate", TopK(0.01, approximate=True), x, ""),
        ("RandomK 1%", RandomK(0.01), x, "indices from a shared seed"),
        ("int8", Quantize(8), x, "chunk 1024"),
        ("int4", Quantize(4), x, "chunk 1024"),
        ("int2", Quantize(2), x, "chunk 1024"),
        ("int4 stochastic", Quantize(4, stochastic=True), x, "hashed uniforms"),
        ("sign", Sign(), x, "1 bit + mean|x|"),
        ("QSGD 4 levels", QSGD(4), x, "hashed uniforms, 2-norm per 512"),
        ("TernGrad", TernGrad(), x, "hashed uniforms, one max-norm"),
        ("TopK 1% + int8", Chain(TopK(0.01, approximate=True), Quantize(8)), x, ""),
        ("PowerSGD rank 4", PowerSGD(4), mat, f"{side}x{side}; vs PyTorch's hook in the DDP bench"),
    ]
    out = []
    for name, comp, t, note in codecs:
        target = None if isinstance(comp, PowerSGD) else CODEC_TARGET
        packet = comp.compress(t)
        dst = buf[: t.numel()].view(t.shape)
        out += [(f"{name}: compress", lambda c=comp, t=t: c.compress(t), target, note),
                (f"{name}: decompress", lambda c=comp, p=packet, d=dst: c.decompress(p, out=d), target,
                 "into a reused buffer")]
    return out


def cases(x: torch.Tensor):
    """(name, function, target ratio or None, note) for one input tensor."""
    n = x.numel()
    k = max(1, n // 100)
    buf = torch.empty_like(x)
    resid = torch.zeros_like(x)
    approx = TopK(0.01, approximate=True)
    q8, sign = Quantize(8), Sign()
    p8 = q8.compress(x)
    ef = ErrorFeedback(TopK(0.01, approximate=True))
    count = sparse_decode(approx.compress(x))[0].numel()
    out = [
        ("copy (baseline)", lambda: buf.copy_(x), None, "dst.copy_(src), no allocation"),
        ("torch.topk 1% of |x|", lambda: torch.topk(x.abs(), k, sorted=False), None, "PyTorch's own"),
        *codec_cases(x, buf),
        ("error-feedback add", lambda: resid.add_(x), 2, "residual += grad"),
        ("EF step, TopK 1% approx", lambda: ef.compress(x), None,
         f"add + select + cross out; kept {count} for k={k} ({100 * (count / k - 1):+.1f}%)"),
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
            ("int8 compress, torch ops", torch_path(lambda: q8.compress(x)), None, "unfused, for contrast"),
            ("int8 decompress, torch ops", torch_path(lambda: q8.decompress(p8, out=buf)), None, "unfused"),
            ("sign compress, torch ops", torch_path(lambda: sign.compress(x)), None, "unfused"),
            ("QSGD compress, torch ops", torch_path(lambda: QSGD(4).compress(x)), None, "same bits, unfused"),
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
