"""Elementwise kernels behind the quantizers, in two versions that agree.

* ``torch`` path: plain tensor ops; runs on any device, used for CUDA and for small
  tensors. On a CPU every op is one pass over memory, so a quantizer written as
  scale -> round -> cast costs several copies of the tensor.
* ``numba`` path (CPU, large tensors): one fused loop per chunk, so quantize+pack
  reads the gradient once. Numba is used for exactly this: it gives a fused,
  multithreaded, SIMD loop from twenty lines of Python, where the alternative is a
  C++ extension that every learner would have to compile.

Rounding is the same on both paths: ``code = floor(x / scale + offset + 0.5)``
(round half up), so both decode with error <= scale / 2.
Set ``MILKTEA_NUMBA=0`` to force the torch path.
"""
from __future__ import annotations

import os

import numpy as np
import torch

NUMBA_MIN_NUMEL = 1 << 16   # below this, JIT start-up costs more than it saves

try:  # numba is a dependency, but the library must still work where it cannot load
    if os.environ.get("MILKTEA_NUMBA", "1") == "0":
        raise ImportError("disabled by MILKTEA_NUMBA=0")
    import numba
    from numba import njit, prange
    HAVE_NUMBA = True
except Exception:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False


def use_numba(t: torch.Tensor) -> bool:
    return HAVE_NUMBA and t.device.type == "cpu" and t.numel() >= NUMBA_MIN_NUMEL


def _sync_threads():
    if numba.get_num_threads() != min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


if HAVE_NUMBA:
    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_quantize(x, chunk, qmax, codes, scales):  # pragma: no cover - compiled
        n = x.size
        nch = (n + chunk - 1) // chunk
        off = np.float32(qmax) + np.float32(1.5)   # offset qmax+1, plus 0.5 to round
        for c in prange(nch):
            s = c * chunk
            e = min(s + chunk, n)
            m = np.float32(0.0)
            for i in range(s, e):
                m = max(m, abs(x[i]))
            scales[c] = m / np.float32(qmax)
            inv = np.float32(qmax) / max(m, np.float32(1e-38))
            for i in range(s, e):
                codes[i] = np.uint8(np.int32(x[i] * inv + off))

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_dequantize(codes, scales, chunk, qmax, out):  # pragma: no cover - compiled
        n = out.size
        nch = (n + chunk - 1) // chunk
        for c in prange(nch):
            s = c * chunk
            e = min(s + chunk, n)
            sc = scales[c]
            off = np.float32(qmax + 1) * sc
            for i in range(s, e):
                out[i] = np.float32(codes[i]) * sc - off

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_l1(x):  # pragma: no cover - compiled
        s = 0.0
        for i in prange(x.size):
            s += abs(x[i])
        return s

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_sign_pack(bits32, out):  # pragma: no cover - compiled
        # bits32: the float32 gradient viewed as uint32; bit 31 is the sign.
        nb = out.size
        n = bits32.size
        for b in prange(nb):
            base = b * 8
            v = np.uint32(0)
            if base + 8 <= n:
                for j in range(8):
                    v |= (bits32[base + j] >> np.uint32(31)) << np.uint32(j)
            else:
                for j in range(n - base):
                    v |= (bits32[base + j] >> np.uint32(31)) << np.uint32(j)
            out[b] = np.uint8(v)

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_sign_unpack(packed, scale, out):  # pragma: no cover - compiled
        n = out.size
        nb = (n + 7) // 8
        two = np.float32(2.0) * scale
        for b in prange(nb):
            v = packed[b]
            base = b * 8
            for j in range(min(8, n - base)):
                out[base + j] = scale - two * np.float32((v >> j) & 1)


    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_count_above(x, t, block, counts):  # pragma: no cover - compiled
        for b in prange(counts.size):
            c = 0
            for i in range(b * block, min((b + 1) * block, x.size)):
                c += abs(x[i]) >= t
            counts[b] = c

    @njit(parallel=True, cache=True, nogil=True)
    def _nb_fill_above(x, t, block, starts, out):  # pragma: no cover - compiled
        for b in prange(starts.size):
            j = starts[b]
            for i in range(b * block, min((b + 1) * block, x.size)):
                if abs(x[i]) >= t:
                    out[j] = i
                    j += 1


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def quantize(x: torch.Tensor, chunk: int, qmax: int, out_codes: torch.Tensor | None = None):
    """Absmax-quantize a flat float32 tensor chunk by chunk.

    Returns (codes, scales): codes are uint8 in [1, 2*qmax+1] (the signed level plus
    qmax+1), scales are float32, one per chunk, scale = absmax / qmax.
    """
    n = x.numel()
    nch = (n + chunk - 1) // chunk
    codes = out_codes if out_codes is not None else torch.empty(n, dtype=torch.uint8, device=x.device)
    scales = torch.empty(nch, dtype=torch.float32, device=x.device)
    if use_numba(x):
        _sync_threads()
        _nb_quantize(_np(x), chunk, qmax, _np(codes), _np(scales))
        return codes, scales
    full = n - n % chunk
    pieces = [(x[:full].view(-1, chunk), codes[:full].view(-1, chunk), scales[: full // chunk])] if full else []
    if full < n:
        pieces.append((x[full:].view(1, -1), codes[full:].view(1, -1), scales[full // chunk:]))
    for xv, cv, sv in pieces:
        m = torch.linalg.vector_norm(xv, float("inf"), dim=1)
        sv.copy_(m / qmax)
        inv = (qmax / m.clamp_min(1e-38)).unsqueeze(1)
        y = torch.addcmul(torch.tensor(qmax + 1.5, device=x.device), xv, inv)
        cv.copy_(y.to(torch.int32))   # y > 0, so the cast is floor; the result fits a byte
    return codes, scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, chunk: int, qmax: int,
               out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize` into `out` (flat float32)."""
    n = out.numel()
    if use_numba(out):
        _sync_threads()
        _nb_dequantize(_np(codes), _np(scales), chunk, qmax, _np(out))
        return out
    full = n - n % chunk
    pieces = [(codes[:full].view(-1, chunk), out[:full].view(-1, chunk), scales[: full // chunk])] if full else []
    if full < n:
        pieces.append((codes[full:].view(1, -1), out[full:].view(1, -1), scales[full // chunk:]))
    for cv, ov, sv in pieces:
        ov.copy_(cv)
        sv = sv.unsqueeze(1)
        torch.addcmul(-(qmax + 1) * sv, ov, sv, out=ov)
    return out


def sign_pack(x: torch.Tensor) -> torch.Tensor:
    """Pack the sign bits of a flat float32 tensor (1 = negative), 8 per byte."""
    n = x.numel()
    if use_numba(x):
        _sync_threads()
        out = torch.empty((n + 7) // 8, dtype=torch.uint8)
        _nb_sign_pack(_np(x).view(np.uint32), _np(out))
        return out
    from .bits import pack
    return pack(torch.signbit(x).view(torch.uint8), 1)


def sign_unpack(packed: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """out[i] = -scale where bit i is set, else +scale (flat float32)."""
    n = out.numel()
    if use_numba(out):
        _sync_threads()
        _nb_sign_unpack(_np(packed), np.float32(scale), _np(out))
        return out
    from .bits import unpack
    bits = unpack(packed, 1, n)
    torch.sub(torch.tensor(scale, dtype=out.dtype, device=out.device), bits, alpha=2 * scale, out=out)
    return out


def above_threshold(x: torch.Tensor, t: float) -> torch.Tensor:
    """Sorted int64 positions where |x| >= t (flat x), without a full-size temporary."""
    if use_numba(x) and x.dtype in (torch.float32, torch.float64):
        _sync_threads()
        xn = _np(x)
        block = 1 << 16
        counts = np.empty((x.numel() + block - 1) // block, dtype=np.int64)
        _nb_count_above(xn, xn.dtype.type(t), block, counts)
        starts = np.zeros_like(counts)
        np.cumsum(counts[:-1], out=starts[1:])
        out = torch.empty(int(counts.sum()), dtype=torch.int64)
        _nb_fill_above(xn, xn.dtype.type(t), block, starts, _np(out))
        return out
    return (x.abs() >= t).nonzero().reshape(-1)


def l1_norm(x: torch.Tensor) -> float:
    """sum |x| of a flat float32 tensor."""
    if use_numba(x):
        _sync_threads()
        return float(_nb_l1(_np(x)))
    return float(torch.linalg.vector_norm(x, 1))
