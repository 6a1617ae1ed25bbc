"""The compiled (numba) loop behind Cast: float32 to float16 or bfloat16 in one pass, with
integer operations only (so no floating-point mode can change a result), rounding to
nearest even as IEEE 754 and torch's own conversion do; the tests compare the two on
every exponent. Loaded on first use, like milktea.numba_kernels."""
from __future__ import annotations

import milktea.threads  # noqa: F401  (sizes numba's pool per rank before numba starts it)

import numpy as np
from numba import njit, prange

from milktea.numba_compile import share_compiles

BLOCK = 1 << 15


@njit(inline="always")
def half_bits(w):
    """float16 bits of the float32 whose bits are w (a finite value; too large: infinity).
    Every case is computed and one selected, without branches, so that LLVM vectorizes."""
    a = w & 0x7FFFFFFF
    r = a - 0x38000000                                   # a normal half: rebias the exponent,
    normal = (r + 0x0FFF + ((r >> 13) & 1)) >> 13        # drop 13 bits, ties to even
    shift = min(max(126 - (a >> 23), 14), 24)            # a subnormal half (or a tie that rounds to 0)
    m = (a & 0x7FFFFF) | 0x800000
    sub = (m + (1 << (shift - 1)) - 1 + ((m >> shift) & 1)) >> shift
    h = 0x7C00 if a >= 0x47800000 else (normal if a >= 0x38800000 else (sub if a >= 0x33000000 else 0))
    return ((w >> 16) & 0x8000) | h


@njit(inline="always")
def bfloat_bits(w):
    """bfloat16 bits of the finite float32 whose bits are w: the top half, ties to even."""
    return (w + 0x7FFF + ((w >> 16) & 1)) >> 16


@njit(parallel=True, cache=True, nogil=True)
def cast16(w, out, bf16):
    """out[i] = the 16-bit float nearest x[i] (w: the uint32 bits of a finite float32 x);
    returns how many came out infinite (float16 only: each is an overflow)."""
    n = w.size
    over = 0
    for b in prange((n + BLOCK - 1) // BLOCK):
        s = b * BLOCK
        e = min(s + BLOCK, n)
        ws = w[s:e]
        os_ = out[s:e]
        count = 0
        if bf16:
            for i in range(e - s):
                os_[i] = bfloat_bits(np.int64(ws[i]))
        else:
            for i in range(e - s):
                h = half_bits(np.int64(ws[i]))
                os_[i] = h
                count += (h & 0x7FFF) == 0x7C00
        over += count
    return over


share_compiles(globals())   # processes starting together compile each loop once (milktea.numba_compile)
