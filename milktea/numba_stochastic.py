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

Compile time: the small helpers (the hash, a code, a chunk's norm) are plain compiled
functions that LLVM inlines into the loops; only the loops that must be copied per kind of
code (codes_into, values) are inlined by numba itself. numba's own inlining copies and
re-types a helper at every call: with the hash inlined that way into each of the six code
loops, the encoder took 22 CPU seconds to compile, against 13 now, with the same loops
(vectorized alike, the same bits).
"""
from __future__ import annotations

import math

import milktea.threads  # noqa: F401  (sizes numba's pool per rank before numba starts it)

import numpy as np
from numba import njit, prange

from milktea.numba_bits import DEBRUIJN, DEBRUIJN_MUL, abs_max_bits, as_float
from milktea.numba_compile import share_compiles

BLOCK = 1 << 15
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
UNIT = np.float32(2.0 ** -24)
LEVELS_L2, LEVELS_MAX, ABSMAX = 0, 1, 2     # QSGD, TernGrad, stochastic Quantize
EXACT = {"nnan", "ninf", "nsz"}              # as numba_kernels: inputs are finite here


@njit(nogil=True)
def mix(key, j):
    """SplitMix64's output for the state key + (j+1) * golden: 64 random bits for entry j."""
    z = key + np.uint64(j + 1) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    return z ^ (z >> np.uint64(31))


@njit(nogil=True)
def halves(z):
    """The two uniforms one 64-bit draw gives: its top 24 bits, and bits 8 to 31."""
    return (np.float32(z >> np.uint64(40)) * UNIT,
            np.float32((z >> np.uint64(8)) & np.uint64(0xFFFFFF)) * UNIT)


@njit(nogil=True)
def uniform(key, j):
    """The float32 uniform in [0, 1) of entry j: a half of mix(key, j // 2) (the top half
    for even j): one hash serves two entries."""
    z = mix(key, j >> 1)
    return np.float32((z >> np.uint64(40 - 32 * (j & 1))) & np.uint64(0xFFFFFF)) * UNIT


@njit(nogil=True)
def code_of(x, div, kind, s, u):
    """The code of entry j (value x): QSGD/TernGrad levels s + sign(x) * level, level in
    [0, s]; stochastic Quantize floor(x / div + s + 1 + u) in [1, 2s + 1] (s = qmax).
    Branch-free, so LLVM vectorizes the loops; a cast truncates, which is floor for the
    levels (t >= 0) and differs from it only below 1, where both clamp to 1."""
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


@njit(nogil=True)
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


@njit(nogil=True)
def grid_power(top, h):
    """k with top * 2**k < 2**h: the grid of the chunk whose max |x| is top."""
    return h - math.frexp(np.float64(top))[1]


@njit(fastmath=EXACT, nogil=True)
def piece_squares(x, s, e, k):
    """Sum of a*a over x[s:e], a = |x| * 2**k truncated to an integer (two float32
    products by powers of two, each in float32's range), as int64."""
    g1 = np.float32(math.ldexp(1.0, k // 2))
    g2 = np.float32(math.ldexp(1.0, k - k // 2))
    xs = x[s:e]
    acc = np.int64(0)
    for i in range(xs.size):
        a = np.int64(np.int32((abs(xs[i]) * g1) * g2))
        acc += a * a
    return acc


@njit(nogil=True)
def l2_norm(acc, top, k, cap):
    """The chunk's 2-norm from its summed squares: at least its max, at most cap."""
    if top == 0:
        return np.float32(0.0)
    r = np.float32(math.sqrt(np.float64(acc)) * math.ldexp(1.0, -k))
    return min(max(r, top), cap)


@njit(nogil=True)
def sent_of(kind, top, s, acc, h, cap):
    """What a chunk sends: its scale (ABSMAX), 2-norm (LEVELS_L2) or max (LEVELS_MAX)."""
    if kind == ABSMAX:
        return min(top / np.float32(s), cap)
    if kind == LEVELS_L2:
        return l2_norm(acc, top, grid_power(top, h), cap)
    return min(top, cap)


@njit(inline="always")
def encode_piece(x, st, e, div, kind, s, key, bits, out):
    """Codes of x[st:e] packed into their bytes of out (st on a byte). The kind is made a
    constant here, so each loop is compiled for one kind: with the kind's branch inside,
    LLVM left the 2-bit loop unvectorized (twice slower)."""
    if kind == ABSMAX:
        codes_into(x, st, e, div, ABSMAX, s, key, bits, out)
    else:                                 # both levels kinds code alike (see code_of)
        codes_into(x, st, e, div, LEVELS_MAX, s, key, bits, out)


@njit(inline="always")
def codes_into(x, st, e, div, kind, s, key, bits, out):
    ob = out[st * bits // 8:(e * bits + 7) // 8]
    xs = x[st:e]
    if bits == 8:
        for i in range(e - st):
            ob[i] = code_of(xs[i], div, kind, s, uniform(key, st + i))
        return
    per = 8 // bits
    whole = (e - st) // per
    pair = st >> 1                        # st is even here: a byte holds whole pairs
    if bits == 4:
        for b in range(whole):
            u0, u1 = halves(mix(key, pair + b))
            ob[b] = code_of(xs[2 * b], div, kind, s, u0) | (code_of(xs[2 * b + 1], div, kind, s, u1) << np.uint8(4))
    else:
        for b in range(whole):
            u0, u1 = halves(mix(key, pair + 2 * b))
            u2, u3 = halves(mix(key, pair + 2 * b + 1))
            j = 4 * b
            ob[b] = code_of(xs[j], div, kind, s, u0) | (code_of(xs[j + 1], div, kind, s, u1) << np.uint8(2)) | \
                (code_of(xs[j + 2], div, kind, s, u2) << np.uint8(4)) | \
                (code_of(xs[j + 3], div, kind, s, u3) << np.uint8(6))
    if whole < ob.size:                   # a last, partly filled byte
        v = np.uint8(0)
        for t in range(e - st - whole * per):
            j = whole * per + t
            v |= code_of(xs[j], div, kind, s, uniform(key, st + j)) << np.uint8(bits * t)
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
    xi = x.view(np.int32)
    small = chunk <= BLOCK                # each chunk whole: its max, squares and codes at once
    per_chunk = 1 if small else (chunk + BLOCK - 1) // BLOCK
    pieces = nch * per_chunk
    if not small:                         # every chunk's norm first, piece by piece
        part = np.zeros(pieces, dtype=np.int32)
        for p in prange(pieces):
            c, st, e = piece_of(p, chunk, per_chunk, n)
            part[p] = abs_max_bits(xi[st:e])
        topbits = np.zeros(nch, dtype=np.int32)
        for p in range(pieces):
            topbits[p // per_chunk] = max(topbits[p // per_chunk], part[p])
        tops = np.zeros(nch, dtype=np.float32)     # each chunk's max |x|
        for c in range(nch):
            tops[c] = as_float(topbits[c])
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
    # one loop writes the codes, so the code loops are compiled once (twice, they took 36 s)
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        if small:
            top = as_float(abs_max_bits(xi[st:e]))   # a slice: x[s + i] does not vectorize
            acc = piece_squares(x, st, e, grid_power(top, h)) if kind == LEVELS_L2 and top > 0 else np.int64(0)
            sent[c] = sent_of(kind, top, s, acc, h, cap)
        if st < e:
            sc = sent[c]
            encode_piece(x, st, e, sc if sc > 0 else np.float32(1.0), kind, s, key, bits, out)


SUB = 256   # entries a decoder adds at a time, from a scratch that stays in L1


@njit(inline="always")
def values(pb, count, bits, offset, sc, div, dst):
    """dst[i] = (code i - offset) * sc / div for the `count` codes packed in pb (byte by
    byte, so LLVM vectorizes; y / 1 is y)."""
    if bits == 8:
        for i in range(count):
            dst[i] = np.float32(np.int32(pb[i]) - offset) * sc / div
        return
    per = 8 // bits
    whole = count // per
    if bits == 4:
        for b in range(whole):
            byte = np.int32(pb[b])
            dst[2 * b] = np.float32((byte & 15) - offset) * sc / div
            dst[2 * b + 1] = np.float32((byte >> 4) - offset) * sc / div
    elif bits == 2:
        for b in range(whole):
            byte = np.int32(pb[b])
            dst[4 * b] = np.float32((byte & 3) - offset) * sc / div
            dst[4 * b + 1] = np.float32(((byte >> 2) & 3) - offset) * sc / div
            dst[4 * b + 2] = np.float32(((byte >> 4) & 3) - offset) * sc / div
            dst[4 * b + 3] = np.float32((byte >> 6) - offset) * sc / div
    for i in range(whole * per, count):          # a last, partly filled byte
        code = (np.int32(pb[(i * bits) >> 3]) >> ((i * bits) & 7)) & ((1 << bits) - 1)
        dst[i] = np.float32(code - offset) * sc / div


@njit(inline="always")
def largest_code(pb, count, bits):
    """The largest of the `count` codes packed in pb, byte by byte (LLVM vectorizes it)."""
    w = 0
    per = 8 // bits
    whole = count // per
    if bits == 8:
        for b in range(whole):
            w = max(w, np.int32(pb[b]))
    elif bits == 4:
        for b in range(whole):
            w = max(w, max(np.int32(pb[b] & 15), np.int32(pb[b] >> 4)))
    else:
        for b in range(whole):
            v = np.int32(pb[b])
            w = max(w, max(max(v & 3, (v >> 2) & 3), max((v >> 4) & 3, v >> 6)))
    for i in range(whole * per, count):
        w = max(w, np.int32((pb[(i * bits) >> 3] >> ((i * bits) & 7)) & ((1 << bits) - 1)))
    return w


@njit(parallel=True, cache=True, nogil=True)   # no fastmath: out +- v rounds as torch's add_
def decode(packed, steps, chunk, offset, bits, out, mode, div, allowed):
    """(code - offset) * steps[chunk] of every entry, written (mode 0), added (1) or
    subtracted (-1) into out, divided by `div` where it is not 1. Codes above `allowed`
    are looked for first (allowed < 2**bits - 1): then nothing is written and the largest
    code is returned, else 0 (or, without a check, the largest code allowed)."""
    n = out.size
    per_chunk = (min(chunk, n) + BLOCK - 1) // BLOCK
    pieces = steps.size * per_chunk
    mask = (1 << bits) - 1
    if allowed < mask:
        worst = np.zeros(pieces, dtype=np.int32)
        for p in prange(pieces):
            c, st, e = piece_of(p, chunk, per_chunk, n)
            worst[p] = largest_code(packed[st * bits // 8:(e * bits + 7) // 8], max(e - st, 0), bits)
        top = worst.max()
        if top > allowed:
            return top
    sign = np.float32(-1.0 if mode < 0 else 1.0)
    one = np.float32(1.0)
    for p in prange(pieces):
        c, st, e = piece_of(p, chunk, per_chunk, n)
        if st >= e:
            continue
        pb = packed[st * bits // 8:(e * bits + 7) // 8]
        os_ = out[st:e]
        if mode == 0:                           # write: out = v / div
            values(pb, e - st, bits, offset, steps[c], div, os_)
            continue
        tmp = np.empty(min(SUB, e - st), dtype=np.float32)
        for q in range(0, e - st, SUB):         # add: v into the scratch, then out = (out +- v) / div
            m = min(SUB, e - st - q)
            values(pb[q * bits // 8:], m, bits, offset, steps[c], one, tmp)
            o = os_[q:q + m]
            for j in range(m):
                o[j] = (o[j] + tmp[j] * sign) / div
    return min(allowed, mask)


@njit(cache=True, nogil=True)
def random_positions(n, k, key, bitmap, out):
    """k distinct positions in [0, n), sorted, into out: draw a = the top 32 bits of
    mix(key, j) for j = 0, 1, ..., skip a >= (2**32 // n) * n (so that a % n is exactly
    uniform), and keep p = a % n unless it was drawn before, until k are kept. Those are a
    uniformly random k-subset; a bitmap of n bits (zeroed by the caller) marks them, and
    reading it in order sorts them."""
    limit = np.uint64((1 << 32) // n * n)
    nn = np.uint64(n)
    count = 0
    j = 0
    while count < k:
        a = mix(key, j) >> np.uint64(32)
        j += 1
        if a >= limit:
            continue
        p = a % nn
        w = p >> np.uint64(6)
        b = np.uint64(1) << (p & np.uint64(63))
        if bitmap[w] & b == 0:
            bitmap[w] |= b
            count += 1
    o = 0
    for w in range(bitmap.size):
        v = bitmap[w]
        while v != 0:
            low = v & (~v + np.uint64(1))
            out[o] = w * 64 + DEBRUIJN[(low * np.uint64(DEBRUIJN_MUL)) >> np.uint64(58)]
            o += 1
            v ^= low


share_compiles(globals())   # processes starting together compile each loop once (milktea.numba_compile)
