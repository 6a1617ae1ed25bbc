"""Elementwise kernels behind the quantizers, in two versions that agree.

* ``torch`` path: plain tensor ops; runs on any device, used for CUDA and for small
  tensors. On a CPU every op is one pass over memory, so a quantizer written as
  scale -> round -> cast costs several copies of the tensor.
* ``numba`` path (CPU, large tensors): one fused loop per chunk, so quantize+pack
  reads the gradient once. Numba is used for exactly this: it gives a fused,
  multithreaded, SIMD loop from twenty lines of Python, where the alternative is a
  C++ extension that every learner would have to compile.

The two paths give the same bits: ``code = floor(x / scale + qmax + 1.5)`` (round
half up, one IEEE division and one addition in float32, no fused multiply-add),
``scale = absmax / qmax`` (the maximum is exact in any order), and decoding is
``(code - qmax - 1) * scale`` (one rounding; scales are capped so that this stays
finite for chunks whose max is near float32's largest value). Sign's scale is a float64 sum of |x| on both paths, which
differ only in summation order: the float32 scale may differ in its last bit
(checked by the tests); its sign bits are identical.
Set ``MILKTEA_NUMBA=0`` to force the torch path.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch

import milktea.threads  # noqa: E402,F401  (sizes numba's pool per rank before numba loads)

NUMBA_MIN_NUMEL = 1 << 16   # below this, JIT start-up costs more than it saves

try:  # numba is a dependency, but the library must still work where it cannot load
    if os.environ.get("MILKTEA_NUMBA", "1") == "0":
        raise ImportError("disabled by MILKTEA_NUMBA=0")
    import numba
    from numba import njit, prange
    HAVE_NUMBA = True
except Exception:  # pragma: no cover - depends on the environment
    HAVE_NUMBA = False


@functools.lru_cache(maxsize=None)
def scale_cap(qmax: int) -> float:
    """The largest float32 scale with qmax * scale finite: scales are clamped to it, so
    that a chunk whose max is near float32's largest value decodes finite."""
    top = np.float32(np.finfo(np.float32).max)
    c = top / np.float32(qmax)
    with np.errstate(over="ignore"):
        while not np.isfinite(c * np.float32(qmax)):
            c = np.nextafter(c, np.float32(0))
    return float(c)


def use_numba(t: torch.Tensor) -> bool:
    return HAVE_NUMBA and t.device.type == "cpu" and t.numel() >= NUMBA_MIN_NUMEL


def _sync_threads():
    if numba.get_num_threads() != min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


BLOCK = 1 << 15   # entries per parallel work item in the loops below

if HAVE_NUMBA:
    # Loops are written over slices (xs[i] for i in range(len)), which LLVM vectorizes;
    # indexing the full array with offsets (x[s + i]) runs about twice slower.
    # No 'contract' (fused multiply-add) and no 'arcp' (division by reciprocal): the
    # codes must be bit for bit those of the torch path.
    EXACT = {"nnan", "ninf", "nsz"}

    @njit(fastmath=EXACT, cache=True, nogil=True)
    def _absmax_scale(xs, qmax, cap):  # pragma: no cover - compiled, inlined by LLVM
        """(scale, divisor) of one chunk: scale = max|x| / qmax (at most `cap`); divisor =
        scale, or 1 where scale is 0 (then every |x| is so small its code is the zero level)."""
        m = np.float32(0.0)
        for i in range(xs.size):
            m = max(m, abs(xs[i]))
        sc = min(m / np.float32(qmax), cap)
        return sc, sc if sc > np.float32(0.0) else np.float32(1.0)

    @njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
    def _nb_quantize(x, chunk, qmax, cap, codes, scales):  # pragma: no cover - compiled
        n = x.size
        off = np.float32(qmax) + np.float32(1.5)   # offset qmax+1, plus 0.5 to round
        for c in prange((n + chunk - 1) // chunk):
            s = c * chunk
            e = min(s + chunk, n)
            xs = x[s:e]
            cs = codes[s:e]
            scales[c], div = _absmax_scale(xs, qmax, cap)
            for i in range(e - s):
                cs[i] = np.uint8(np.int32(xs[i] / div + off))

    @njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
    def _nb_dequantize(codes, scales, chunk, qmax, out):  # pragma: no cover - compiled
        n = out.size
        for c in prange((n + chunk - 1) // chunk):
            s = c * chunk
            e = min(s + chunk, n)
            cs = codes[s:e]
            os_ = out[s:e]
            sc = scales[c]
            for i in range(e - s):
                os_[i] = np.float32(np.int32(cs[i]) - (qmax + 1)) * sc

    @njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
    def _nb_quantize_packed(x, chunk, qmax, cap, bits, out, scales):  # pragma: no cover - compiled
        # 4- and 2-bit codes, packed as they are made; every chunk starts on a byte
        n = x.size
        per = 8 // bits
        off = np.float32(qmax) + np.float32(1.5)
        for c in prange((n + chunk - 1) // chunk):
            s = c * chunk
            e = min(s + chunk, n)
            xs = x[s:e]
            scales[c], div = _absmax_scale(xs, qmax, cap)
            ob = out[s * bits // 8:(e * bits + 7) // 8]
            whole = (e - s) // per
            if bits == 4:
                for j in range(whole):
                    lo = np.uint8(np.int32(xs[2 * j] / div + off))
                    hi = np.uint8(np.int32(xs[2 * j + 1] / div + off))
                    ob[j] = lo | (hi << np.uint8(4))
            else:
                for j in range(whole):
                    c0 = np.uint8(np.int32(xs[4 * j] / div + off))
                    c1 = np.uint8(np.int32(xs[4 * j + 1] / div + off))
                    c2 = np.uint8(np.int32(xs[4 * j + 2] / div + off))
                    c3 = np.uint8(np.int32(xs[4 * j + 3] / div + off))
                    ob[j] = c0 | (c1 << np.uint8(2)) | (c2 << np.uint8(4)) | (c3 << np.uint8(6))
            if whole < ob.size:                   # a last, partly filled byte
                v = np.uint8(0)
                for t in range(e - s - whole * per):
                    v |= np.uint8(np.int32(xs[whole * per + t] / div + off)) << np.uint8(bits * t)
                ob[whole] = v

    @njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
    def _nb_dequantize_packed(packed, scales, chunk, qmax, bits, out):  # pragma: no cover - compiled
        n = out.size
        mask = (1 << bits) - 1
        for c in prange((n + chunk - 1) // chunk):
            s = c * chunk
            e = min(s + chunk, n)
            os_ = out[s:e]
            pb = packed[s * bits // 8:(e * bits + 7) // 8]
            sc = scales[c]
            for i in range(e - s):
                code = (pb[(i * bits) >> 3] >> ((i * bits) & 7)) & mask
                os_[i] = np.float32(np.int32(code) - (qmax + 1)) * sc

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_sign_pack(x, out, partial_l1):  # pragma: no cover - compiled
        # bit 1 = negative; exact zeros (of either sign) count as positive
        n = x.size
        for b in prange((n + BLOCK - 1) // BLOCK):
            s = b * BLOCK
            e = min(s + BLOCK, n)
            xs = x[s:e]
            signs = np.zeros(BLOCK, dtype=np.uint8)
            acc = np.float64(0.0)
            for i in range(e - s):
                signs[i] = np.uint8(xs[i] < np.float32(0.0))
                acc += np.float64(abs(xs[i]))
            partial_l1[b] = acc
            # eight 0/1 bytes -> one byte: a multiply gathers them into the top byte
            words = signs.view(np.uint64)
            os_ = out[s // 8:(e + 7) // 8]
            for j in range(os_.size):
                os_[j] = np.uint8((words[j] * np.uint64(0x0102040810204080)) >> np.uint64(56))

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_sign_unpack(packed, scale, out):  # pragma: no cover - compiled
        # +-scale as (1 - 2 bit) * scale: exact, and no 2 * scale to overflow
        n = out.size
        for b in prange((n + BLOCK - 1) // BLOCK):
            s = b * BLOCK
            e = min(s + BLOCK, n)
            os_ = out[s:e]
            ps = packed[s // 8:(e + 7) // 8]
            for i in range(e - s):
                os_[i] = np.float32(1 - 2 * np.int32((ps[i >> 3] >> (i & 7)) & 1)) * scale

    @njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def _nb_count_above(x, t, counts):  # pragma: no cover - compiled
        n = x.size
        for b in prange(counts.size):
            s = b * BLOCK
            e = min(s + BLOCK, n)
            xs = x[s:e]
            c = 0
            for i in range(e - s):
                c += abs(xs[i]) >= t
            counts[b] = c

    @njit(parallel=True, cache=True, nogil=True)
    def _nb_fill_above(x, t, starts, out):  # pragma: no cover - compiled
        n = x.size
        for b in prange(starts.size):
            s = b * BLOCK
            e = min(s + BLOCK, n)
            xs = x[s:e]
            j = starts[b]
            for i in range(e - s):
                if abs(xs[i]) >= t:
                    out[j] = s + i
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
        _nb_quantize(_np(x), chunk, qmax, np.float32(scale_cap(qmax)), _np(codes), _np(scales))
        return codes, scales
    full = n - n % chunk
    pieces = [(x[:full].view(-1, chunk), codes[:full].view(-1, chunk), scales[: full // chunk])] if full else []
    if full < n:
        pieces.append((x[full:].view(1, -1), codes[full:].view(1, -1), scales[full // chunk:]))
    for xv, cv, sv in pieces:
        sv.copy_((torch.linalg.vector_norm(xv, float("inf"), dim=1) / qmax).clamp_(max=scale_cap(qmax)))
        div = torch.where(sv > 0, sv, 1.0).unsqueeze(1)
        y = torch.div(xv, div).add_(qmax + 1.5)
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
        ov.copy_(cv).sub_(qmax + 1).mul_(sv.unsqueeze(1))
    return out


def sign_pack_l1(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Sign bits of a flat float32 tensor (1 = negative, 0 for +-0), 8 per byte, and
    sum |x| accumulated in float64."""
    n = x.numel()
    if use_numba(x):
        _sync_threads()
        out = torch.empty((n + 7) // 8, dtype=torch.uint8)
        partial = np.empty((n + BLOCK - 1) // BLOCK, dtype=np.float64)
        _nb_sign_pack(_np(x), _np(out), partial)
        return out, float(partial.sum())
    from .bits import pack
    return pack((x < 0).view(torch.uint8), 1), float(x.abs().sum(dtype=torch.float64))


def sign_unpack(packed: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """out[i] = -scale where bit i is set, else +scale (flat float32)."""
    n = out.numel()
    if use_numba(out):
        _sync_threads()
        _nb_sign_unpack(_np(packed), np.float32(scale), _np(out))
        return out
    from .bits import unpack
    return sign_values(unpack(packed, 1, n), scale, out)


def sign_values(bits: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """out = (1 - 2 bits) * scale, as the numba path computes it (no overflow)."""
    return out.copy_(bits).mul_(-2).add_(1).mul_(scale)


def above_threshold(x: torch.Tensor, t: float) -> torch.Tensor:
    """Sorted int64 positions where |x| >= t (flat x), without a full-size temporary."""
    if use_numba(x) and x.dtype in (torch.float32, torch.float64):
        _sync_threads()
        xn = _np(x)
        counts = np.empty((x.numel() + BLOCK - 1) // BLOCK, dtype=np.int64)
        _nb_count_above(xn, xn.dtype.type(t), counts)
        starts = np.zeros_like(counts)
        np.cumsum(counts[:-1], out=starts[1:])
        out = torch.empty(int(counts.sum()), dtype=torch.int64)
        _nb_fill_above(xn, xn.dtype.type(t), starts, _np(out))
        return out
    return (x.abs() >= t).nonzero().reshape(-1)


def quantize_packed(x: torch.Tensor, chunk: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Absmax-quantize a flat float32 tensor to `bits`-bit codes, packed (see bits.pack)."""
    from .bits import pack
    qmax = 2 ** (bits - 1) - 1
    if bits < 8 and use_numba(x) and ((chunk * bits) % 8 == 0 or chunk >= x.numel()):
        _sync_threads()
        n = x.numel()
        out = torch.empty((n * bits + 7) // 8, dtype=torch.uint8)
        scales = torch.empty((n + chunk - 1) // chunk, dtype=torch.float32)
        _nb_quantize_packed(_np(x), chunk, qmax, np.float32(scale_cap(qmax)), bits, _np(out), _np(scales))
        return out, scales
    codes, scales = quantize(x, chunk, qmax)
    return pack(codes, bits), scales


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, chunk: int, bits: int,
                      out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_packed` into `out` (flat float32)."""
    from .bits import unpack
    qmax = 2 ** (bits - 1) - 1
    if bits < 8 and use_numba(out) and ((chunk * bits) % 8 == 0 or chunk >= out.numel()):
        _sync_threads()
        _nb_dequantize_packed(_np(packed), _np(scales), chunk, qmax, bits, _np(out))
        return out
    return dequantize(unpack(packed, bits, out.numel()), scales, chunk, qmax, out)
