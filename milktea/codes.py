"""Packed codes back to values, in one compiled pass: the decoder of every codec that sends
`bits`-bit codes and a float32 step per chunk (the quantizers: (code - qmax - 1) * scale;
QSGD and TernGrad: (code - levels) * norm / levels), writing, adding or subtracting into
an output, with its torch twins in milktea.kernels and the codecs. The compiled loops are
in milktea.numba_stochastic, loaded on first use.
"""
from __future__ import annotations

import functools
import math

import torch

from . import kernels
from .bits import packed_size, unpack


def aligned(n: int, chunk: int, bits: int) -> bool:
    """Whether every chunk of `bits`-bit codes starts on a byte (the compiled loops need it)."""
    return (chunk * bits) % 8 == 0 or chunk >= n


@functools.lru_cache(maxsize=None)
def compiled():
    from . import numba_stochastic
    return numba_stochastic


def compiled_for(t: torch.Tensor, n: int, chunk: int, bits: int):
    """The compiled loops where they run on t (see kernels.jit) and chunks start on a byte."""
    return compiled() if aligned(n, chunk, bits) and kernels.jit(t) is not None else None


def decode(packed: torch.Tensor, steps: torch.Tensor, chunk: int, offset: int, bits: int, out: torch.Tensor,
           mode: int = 0, div: int = 1, allowed: int | None = None, what: str = "qsgd") -> bool:
    """(code - offset) * steps[chunk of each entry] written (mode 0), added (+1) or
    subtracted (-1) into flat float32 `out`, then divided by `div`, in one compiled pass
    (the quantizers' decoder too: offset qmax + 1). allowed: every code is first checked
    to be at most this (QSGD and TernGrad: 2 * levels), else ValueError naming the codec
    `what` and nothing is written. False where the compiled loop does not run (the
    caller decodes with torch)."""
    n = out.numel()
    ok = out.dtype == torch.float32 and out.is_contiguous() and steps.dtype == torch.float32
    nb = compiled_for(out, n, chunk, bits) if ok else None
    if nb is None:
        return False
    import numpy as np
    limit = (1 << bits) - 1 if allowed is None else allowed
    top = nb.decode(packed.numpy(), steps.numpy(), chunk, offset, bits, out.view(-1).numpy(), mode,
                    np.float32(div), limit)
    if top > limit:
        raise ValueError(f"malformed {what} packet: a code is {top}, above 2 * levels = {limit}")
    return True


def dequantize_add(packed: torch.Tensor, scales: torch.Tensor, chunk: int, bits: int,
                   out: torch.Tensor, alpha: float, div: int = 1) -> bool:
    """out += alpha * dequantize_packed(...) in one compiled pass (flat float32 `out`,
    alpha +-1: then alpha * v is exact and the sum has decode-then-add's bits), then
    out /= div in the same pass where div != 1. False where that does not run (the
    caller adds piece by piece)."""
    return alpha in (1.0, -1.0) and decode(packed, scales, chunk, 2 ** (bits - 1), bits, out,
                                           -1 if alpha < 0 else 1, div)


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, chunk: int, bits: int,
                      out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_packed` into `out` (flat float32)."""
    if decode(packed, scales, chunk, 2 ** (bits - 1), bits, out):
        return out
    n = out.numel()
    step = chunk * max(1, kernels.piece(out.device) // chunk)   # whole chunks, starting on a byte
    step *= 8 // math.gcd(step, 8)
    for s in range(0, n, step):
        e = min(s + step, n)
        kernels.dequantize(unpack(packed[s * bits // 8: packed_size(e, bits)], bits, e - s),
                           scales[s // chunk: -(-e // chunk)], chunk, 2 ** (bits - 1) - 1, out[s:e])
    return out
