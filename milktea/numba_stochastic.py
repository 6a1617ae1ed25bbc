"""The compiled (numba) loops of the stochastic codecs (QSGD, TernGrad, stochastic
Quantize), loaded on first use like milktea.numba_kernels. Each has a torch twin in
milktea.stochastic that gives the same bits (the tests compare them), because both
compute the same things the same way:

* the uniform of entry j is a hash of (key, j) (SplitMix64's output function on 64-bit
  integers, which wrap alike everywhere), so entries draw in any order, in parallel;
* QSGD's 2-norm sums integers (each square, exact in float64, floored on a grid set by
  the chunk's maximum), so the order of the sum does not matter;
* levels are float32 operations one by one, as torch does them: no fused multiply-add.

A piece is at most BLOCK entries of one chunk and starts on a byte (the caller checks that
chunks do); pieces run in parallel, so a single chunk of a whole tensor does too.
"""
from __future__ import annotations

import math

import milktea.threads  # noqa: F401  (sizes numba's pool per rank before numba starts it)

import numpy as np
from numba import njit, prange

BLOCK = 1 << 15
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
UNIT = np.float32(2.0 ** -24)
LEVELS_L2, LEVELS_MAX, ABSMAX = 0, 1, 2     # QSGD, TernGrad, stochastic Quantize
EXACT = {"nnan", "ninf", "nsz"}              # as numba_kernels: inputs are finite here


@njit(inline="always")
def uniform(key, j):
    """The float32 uniform in [0, 1) of entry j: 24 bits of SplitMix64(key + (j+1) * golden)."""
    z = key + np.uint64(j + 1) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    z = z ^ (z >> np.uint64(31))
    return np.float32(z >> np.uint64(40)) * UNIT


@njit(inline="always")
def code_of(x, div, kind, s, key, j):
    """The code of entry j (value x): QSGD/TernGrad levels s + sign(x) * level, level in
    [0, s]; stochastic Quantize floor(x / div + s + 1 + u) in [1, 2s + 1] (s = qmax).
    Branch-free, so LLVM vectorizes the loops; a cast truncates, which is floor for the
    levels (t >= 0) and differs from it only below 1, where both clamp to 1."""
    u = uniform(key, j)
    if kind == ABSMAX:
        y = x / div
        y = y + np.float32(s + 1)
        y = y + u
        return np.uint8(min(max(np.int32(y), 1), 2 * s + 1))
    t = abs(x) / div
    t = t * np.float32(s)
    t = t + u
    level = min(np.int32(t), s)
    return np.uint8(s + level * (np.int32(x > 0) - np.int32(x < 0)))


@njit(inline="always")
def piece_of(p, chunk, per_chunk, n):
    c = p // per_chunk
    s = c * chunk + (p % per_chunk) * BLOCK
    return c, s, min(s + BLOCK, c * chunk + chunk, n)


@njit(cache=True, nogil=True)
def headroom(chunk):
    """Bits of each |x| on the grid, so that `chunk` squares sum below 2**62 in an int64."""
    b = 0
    while (1 << b) < chunk:
        b += 1
    return (62 - b) // 2


@njit(fastmath=EXACT, inline="always")
def piece_max(x, s, e):
    m = np.float32(0.0)
    for i in range(s, e):
        m = max(m, abs(x[i]))
    return m


@njit(inline="always")
def grid_power(top, h):
    """k with top * 2**k < 2**h: the grid of the chunk whose max |x| is top."""
    return h - math.frexp(np.float64(top))[1]


@njit(fastmath=EXACT, inline="always")
def piece_squares(x, s, e, k):
    """Sum of a*a over x[s:e], a = |x| * 2**k truncated to an integer (two float32
    products by powers of two, each in float32's range), as int64."""
    g1 = np.float32(math.ldexp(1.0, k // 2))
    g2 = np.float32(math.ldexp(1.0, k - k // 2))
    acc = np.int64(0)
    for i in range(s, e):
        a = np.int64(np.int32((abs(x[i]) * g1) * g2))
        acc += a * a
    return acc


@njit(inline="always")
def l2_norm(acc, top, k, cap):
    """The chunk's 2-norm from its summed squares: at least its max, at most cap."""
    if top == 0:
        return np.float32(0.0)
    r = np.float32(math.sqrt(np.float64(acc)) * math.ldexp(1.0, -k))
    return min(max(r, top), cap)


@njit(inline="always")
def sent_of(kind, top, s, acc, h, cap):
    """What a chunk sends: its scale (ABSMAX), 2-norm (LEVELS_L2) or max (LEVELS_MAX)."""
    if kind == ABSMAX:
        return min(top / np.float32(s), cap)
    if kind == LEVELS_L2:
        return l2_norm(acc, top, grid_power(top, h), cap)
    return min(top, cap)


@njit(inline="always")
def encode_piece(x, st, e, div, kind, s, key, bits, out):
    """Codes of x[st:e] packed into their bytes of out (st on a byte)."""
    ob = out[st * bits // 8:(e * bits + 7) // 8]
    xs = x[st:e]
    if bits == 8:
        for i in range(e - st):
            ob[i] = code_of(xs[i], div, kind, s, key, st + i)
        return
    per = 8 // bits
    whole = (e - st) // per
    if bits == 4:
        for b in range(whole):
            ob[b] = code_of(xs[2 * b], div, kind, s, key, st + 2 * b) | \
                (code_of(xs[2 * b + 1], div, kind, s, key, st + 2 * b + 1) << np.uint8(4))
    else:
        for b in range(whole):
            j = 4 * b
            ob[b] = code_of(xs[j], div, kind, s, key, st + j) | \
                (code_of(xs[j + 1], div, kind, s, key, st + j + 1) << np.uint8(2)) | \
                (code_of(xs[j + 2], div, kind, s, key, st + j + 2) << np.uint8(4)) | \
                (code_of(xs[j + 3], div, kind, s, key, st + j + 3) << np.uint8(6))
    if whole < ob.size:                   # a last, partly filled byte
        v = np.uint8(0)
        for t in range(e - st - whole * per):
            j = whole * per + t
            v |= code_of(xs[j], div, kind, s, key, st + j) << np.uint8(bits * t)
        ob[whole] = v


@njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
def encode(x, chunk, kind, s, cap, key, bits, out, sent):
    """Every chunk's scale or norm into sent, every entry's code (see code_of) packed into
    out, `bits` per code. Chunks of at most BLOCK entries take one pass over memory (max,
    squares and codes while the chunk is in cache); longer ones one pass per step, each
    split into pieces that run in parallel."""
    n = x.size
    nch = sent.size
    h = headroom(min(chunk, n))
    if chunk <= BLOCK:
        for c in prange(nch):
            st = c * chunk
            e = min(st + chunk, n)
            top = piece_max(x, st, e)
            acc = piece_squares(x, st, e, grid_power(top, h)) if kind == LEVELS_L2 and top > 0 else np.int64(0)
            sc = sent_of(kind, top, s, acc, h, cap)
            sent[c] = sc
            encode_piece(x, st, e, sc if sc > 0 else np.float32(1.0), kind, s, key, bits, out)
        return
    per_chunk = (chunk + BLOCK - 1) // BLOCK
    pieces = nch * per_chunk
    part = np.zeros(pieces, dtype=np.float32)
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        part[p] = piece_max(x, st, e)
    tops = np.zeros(nch, dtype=np.float32)
    for p in range(pieces):
        tops[p // per_chunk] = max(tops[p // per_chunk], part[p])
    squares = np.zeros(pieces, dtype=np.int64)
    if kind == LEVELS_L2:
        for p in prange(pieces):
            c, st, e = piece_of(p, chunk, per_chunk, n)
            if tops[c] > 0:
                squares[p] = piece_squares(x, st, e, grid_power(tops[c], h))
    accs = np.zeros(nch, dtype=np.int64)
    for p in range(pieces):
        accs[p // per_chunk] += squares[p]
    for c in range(nch):
        sent[c] = sent_of(kind, tops[c], s, accs[c], h, cap)
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        if st < e:
            encode_piece(x, st, e, sent[c] if sent[c] > 0 else np.float32(1.0), kind, s, key, bits, out)


@njit(parallel=True, cache=True, nogil=True)   # no fastmath: out +- v rounds as torch's add_
def decode(packed, steps, chunk, per_chunk, s, bits, out, mode, div):
    """(code - s) * steps[chunk] of every entry, written (mode 0), added (1) or subtracted
    (-1) into out, divided by `div` where it is not 1. Returns the largest code; above
    2 * s, nothing was written (the caller refuses the packet)."""
    n = out.size
    mask = (1 << bits) - 1
    pieces = steps.size * per_chunk
    worst = np.zeros(pieces, dtype=np.int32)
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        pb = packed[st * bits // 8:(e * bits + 7) // 8]
        w = 0
        for i in range(max(e - st, 0)):
            w = max(w, np.int32(pb[i] if bits == 8 else (pb[(i * bits) >> 3] >> ((i * bits) & 7)) & mask))
        worst[p] = w
    top = worst.max()
    if top > 2 * s:
        return top
    one = div / div
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        sc = steps[c]
        pb = packed[st * bits // 8:(e * bits + 7) // 8]
        os_ = out[st:e]
        for i in range(max(e - st, 0)):
            code = np.int32(pb[i] if bits == 8 else (pb[(i * bits) >> 3] >> ((i * bits) & 7)) & mask)
            v = np.float32(code - s) * sc
            y = v if mode == 0 else (os_[i] + v if mode > 0 else os_[i] - v)
            os_[i] = y / div if div != one else y
    return top
