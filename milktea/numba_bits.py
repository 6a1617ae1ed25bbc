"""Bit tricks the compiled loops share (milktea.numba_kernels, milktea.numba_stochastic):
a float's magnitude from its bits, and the place of a word's lowest set bit.

These are inlined into the loops that call them, and numba's on-disk cache stamps each
loop with its own file only: after editing this file, `make clean-numba` (or touch the
two modules above), else they keep running the old code."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

DEBRUIJN_MUL = 0x03F79D71B4CB0A89     # a de Bruijn sequence: (2**i * it) >> 58 differs for every i
DEBRUIJN = np.zeros(64, dtype=np.int64)   # ...so this table gives i back (the lowest set bit's place)
for _i in range(64):
    DEBRUIJN[((DEBRUIJN_MUL << _i) & ((1 << 64) - 1)) >> 58] = _i


@njit(inline="always")
def abs_max_bits(xi):
    """max |x| of a slice, from xi = its int32 view: a finite float's bits without the
    sign order as its magnitude does, and LLVM vectorizes an integer max (a float one it
    left scalar: 2.5x slower). Returned as those bits (see as_float)."""
    m = np.int32(0)
    for i in range(xi.size):
        m = max(m, xi[i] & np.int32(0x7FFFFFFF))
    return m


@njit(inline="always")
def as_float(m):
    """The float32 whose bits are m (not a NaN's, sign bit clear), by arithmetic: numba has
    no scalar bit cast, and an int32 array's float32 view is a second name LLVM may read
    before the write through the first."""
    e = m >> 23
    f = m & 0x7FFFFF
    if e == 0:                            # zero or subnormal
        return np.float32(math.ldexp(np.float64(f), -149))
    if e == 255:
        return np.float32(np.inf)
    return np.float32(math.ldexp(np.float64(f | 0x800000), e - 150))
