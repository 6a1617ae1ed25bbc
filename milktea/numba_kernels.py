"""The compiled (numba) loops behind milktea.kernels, loaded on first use (importing this
module imports numba and compiles every loop, or loads it from numba's cache), so `import
milktea` and small tensors never pay for numba. Each loop has a torch twin in
milktea.kernels that gives the same bits; the tests compare the two. Loops run over
slices (xs[i] for i in range(len)), which LLVM vectorizes (x[s + i] runs twice slower).
No 'contract' (fused multiply-add) and no 'arcp' (division by reciprocal) in the
quantizers: their codes must be bit for bit those of the torch path.
"""
from __future__ import annotations

import milktea.threads  # noqa: F401  (sizes numba's pool per rank before numba starts it)

import numpy as np
from numba import njit, prange

from milktea.numba_bits import DEBRUIJN, DEBRUIJN_MUL, abs_max_bits, as_float
from milktea.numba_compile import share_compiles

BLOCK = 1 << 15   # entries per parallel work item in the loops below
EXACT = {"nnan", "ninf", "nsz"}


@njit(inline="always")
def absmax_scale(xi, qmax, cap):
    """(scale, divisor) of one chunk (xi: its int32 view): scale = max|x| / qmax (at most
    `cap`); divisor = scale, or 1 where scale is 0 (then every |x| is so small its code is
    the zero level)."""
    sc = min(as_float(abs_max_bits(xi)) / np.float32(qmax), cap)
    return sc, sc if sc > np.float32(0.0) else np.float32(1.0)


@njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
def quantize(x, chunk, qmax, cap, codes, scales):
    n = x.size
    xi = x.view(np.int32)
    off = np.float32(qmax) + np.float32(1.5)   # offset qmax+1, plus 0.5 to round
    for c in prange((n + chunk - 1) // chunk):
        s = c * chunk
        e = min(s + chunk, n)
        xs = x[s:e]
        cs = codes[s:e]
        scales[c], div = absmax_scale(xi[s:e], qmax, cap)
        for i in range(e - s):
            cs[i] = np.uint8(np.int32(xs[i] / div + off))


@njit(parallel=True, fastmath=EXACT, cache=True, nogil=True)
def quantize_packed(x, chunk, qmax, cap, bits, out, scales):
    # 4- and 2-bit codes, packed as they are made; every chunk starts on a byte
    n = x.size
    xi = x.view(np.int32)
    per = 8 // bits
    off = np.float32(qmax) + np.float32(1.5)
    for c in prange((n + chunk - 1) // chunk):
        s = c * chunk
        e = min(s + chunk, n)
        xs = x[s:e]
        scales[c], div = absmax_scale(xi[s:e], qmax, cap)
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


@njit(fastmath=True, cache=True, nogil=True)   # inlined by LLVM, with its own fastmath
def sign_block(xs, os_):
    """Sign bits of one block into os_ (bit 1 = negative; exact zeros of either sign count
    as positive) and the block's sum of |x| in float64."""
    signs = np.zeros(BLOCK, dtype=np.uint8)
    acc = np.float64(0.0)
    for i in range(xs.size):
        signs[i] = np.uint8(xs[i] < np.float32(0.0))
        acc += np.float64(abs(xs[i]))
    # eight 0/1 bytes -> one byte: a multiply gathers them into the top byte
    words = signs.view(np.uint64)
    for j in range(os_.size):
        os_[j] = np.uint8((words[j] * np.uint64(0x0102040810204080)) >> np.uint64(56))
    return acc


@njit(parallel=True, fastmath=True, cache=True, nogil=True)
def sign_pack(x, out, partial_l1):
    n = x.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        s = b * BLOCK
        e = min(s + BLOCK, n)
        partial_l1[b] = sign_block(x[s:e], out[s // 8:(e + 7) // 8])


@njit(parallel=True, cache=True, nogil=True)   # no fastmath here: NaN must compare as NaN
def add_sign_pack(x, g, out, partial_l1, bad):
    """Error feedback's update and Sign's packing in one pass over memory: per block,
    x += g (bad[b] = 1 where the sum is a NaN or an infinity), then sign_block on the
    block while it is in cache: sign_pack's bits and partial sums."""
    n = x.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        s = b * BLOCK
        e = min(s + BLOCK, n)
        xs = x[s:e]
        gs = g[s:e]
        nonfinite = 0
        for i in range(e - s):
            v = xs[i] + gs[i]
            xs[i] = v
            nonfinite += not abs(v) < np.inf
        bad[b] = nonfinite > 0
        partial_l1[b] = sign_block(xs, out[s // 8:(e + 7) // 8])


@njit(parallel=True, cache=True, nogil=True)   # no fastmath: out +- v rounds as torch's add_
def sign_into(packed, scale, out, mode, div):
    """v = +-scale from the sign bits, as (1 - 2 bit) * scale (exact, and no 2 * scale to
    overflow), written (mode 0), added (1) or subtracted (-1) into out with one IEEE
    operation per entry; then divided by `div` where it is not 1 (a mean's last packet)."""
    n = out.size
    one = div / div
    for b in prange((n + BLOCK - 1) // BLOCK):
        s = b * BLOCK
        e = min(s + BLOCK, n)
        os_ = out[s:e]
        ps = packed[s // 8:(e + 7) // 8]
        for i in range(e - s):
            v = np.float32(1 - 2 * np.int32((ps[i >> 3] >> (i & 7)) & 1)) * scale
            y = v if mode == 0 else (os_[i] + v if mode > 0 else os_[i] - v)
            os_[i] = y / div if div != one else y


@njit(parallel=True, cache=True, nogil=True)   # no fastmath: NaN must compare as NaN
def collect_above(x, g, t, clear, found, found_x, counts, bad):
    """One pass over memory, block by block: x += g first where g is not empty (error
    feedback's ledger update; g zeroed as it is read where `clear`), then the positions in
    the block where |x| >= t: found[b, :counts[b]] (minus the block's start) and found_x[b,
    ...] their values, while counts[b] fits found's row (a block with more is read again by
    gather_above). bad[b] = 1 where block b met a NaN or an infinity in x + g.
    A block goes by words of 64 entries: a branch-free loop (vectorized) adds and sets one
    bit per hit, then only the set bits are visited, lowest first (twice as fast on 25M
    entries as counting runs of 32 and reading the runs with a hit entry by entry)."""
    n = x.size
    cap = found.shape[1]
    add = g.size > 0
    for b in prange(counts.size):
        s = b * BLOCK
        e = min(s + BLOCK, n)
        xs = x[s:e]
        gs = g[s:e] if add else xs
        fs = found[b]
        fx = found_x[b]
        c = 0
        nonfinite = 0
        for w in range(0, e - s, 64):
            xw = xs[w:min(w + 64, e - s)]
            bits = np.uint64(0)
            if add:
                gw = gs[w:w + xw.size]
                for i in range(xw.size):
                    v = xw[i] + gw[i]
                    xw[i] = v
                    nonfinite += not abs(v) < np.inf     # NaN and +-inf
                    bits |= np.uint64(abs(v) >= t) << np.uint64(i)
                if clear:
                    gw[:] = 0
            else:
                for i in range(xw.size):
                    bits |= np.uint64(abs(xw[i]) >= t) << np.uint64(i)
            while bits:
                low = bits & (~bits + np.uint64(1))
                if c < cap:
                    i = DEBRUIJN[(low * np.uint64(DEBRUIJN_MUL)) >> np.uint64(58)]
                    fs[c] = w + i
                    fx[c] = xw[i]
                c += 1
                bits ^= low
        counts[b] = c
        bad[b] = nonfinite > 0


@njit(parallel=True, cache=True, nogil=True)
def gather_above(x, t, found, found_x, counts, starts, out, out_x):
    """out[starts[b]:starts[b] + counts[b]] = block b's positions with |x| >= t, in order,
    and out_x their values: from collect_above's rows, or read again from x where a row
    was too short."""
    n = x.size
    cap = found.shape[1]
    for b in prange(counts.size):
        s = b * BLOCK
        j = starts[b]
        if counts[b] <= cap:
            fs = found[b]
            fx = found_x[b]
            for i in range(counts[b]):
                out[j + i] = s + fs[i]
                out_x[j + i] = fx[i]
        else:
            xs = x[s:min(s + BLOCK, n)]
            for i in range(xs.size):
                if abs(xs[i]) >= t:
                    out[j] = s + i
                    out_x[j] = xs[i]
                    j += 1


@njit(cache=True, nogil=True)
def kth_key(keys, k):
    """(the k-th largest of the uint32 `keys`, how many keys are larger): a radix select,
    two histograms of 16 bits each, no sort. 1 <= k <= len(keys)."""
    hist = np.zeros(1 << 16, np.int64)
    for i in range(keys.size):
        hist[keys[i] >> 16] += 1
    above = 0            # keys in the buckets above the one that holds the k-th largest
    hi = (1 << 16) - 1
    while above + hist[hi] < k:
        above += hist[hi]
        hi -= 1
    hist[:] = 0
    for i in range(keys.size):
        if keys[i] >> 16 == hi:
            hist[keys[i] & 0xFFFF] += 1
    lo = (1 << 16) - 1
    while above + hist[lo] < k:
        above += hist[lo]
        lo -= 1
    return np.uint32((hi << 16) | lo), above


@njit(cache=True, nogil=True)
def kth_largest_abs(bits, k):
    """The bit pattern of the k-th largest |x| of float32 x viewed as uint32 `bits`."""
    keys = np.empty(bits.size, np.uint32)
    for i in range(bits.size):
        keys[i] = bits[i] & np.uint32(0x7FFFFFFF)
    return kth_key(keys, k)[0]


@njit(cache=True, nogil=True)
def sampled_kth_abs(x, g, pick, run, k):
    """kth_largest_abs of the runs x[r * run:(r + 1) * run] (+ g's, where g is not empty)
    for r in pick, read in place: the sample is never gathered into a tensor first."""
    vals = np.empty(pick.size * run, x.dtype)
    for j in range(pick.size):
        s = pick[j] * run
        vs = vals[j * run:(j + 1) * run]
        xs = x[s:s + run]
        if g.size:
            gs = g[s:s + run]
            for i in range(run):
                vs[i] = xs[i] + gs[i]
        else:
            for i in range(run):
                vs[i] = xs[i]
    return kth_largest_abs(vals.view(np.uint32), k)


@njit(cache=True, nogil=True)
def index_sizes(idx):
    """(delta8 bytes, varint bytes) of the sorted unique positions `idx` (see milktea.index)."""
    prev = -1
    d8 = 0
    vi = 0
    for i in range(idx.size):
        g = idx[i] - prev - 1
        prev = idx[i]
        d8 += 1 + g // 255
        vi += 1 + (g >= 128) + (g >= 16384) + (g >= 2097152) + (g >= 268435456)
    return d8, vi


@njit(cache=True, nogil=True)
def topk_among(bits, cand, k, out, out_bits):
    """out[:k] = the k positions of `cand` (sorted) whose |x| is largest, ties to the
    lowest position, in order, and out_bits[:k] their bits; `bits[i]` is float32
    x[cand[i]] viewed as uint32 (the candidates' own values: no reads of x at random).
    Returns k. |x|'s bit pattern (sign bit cleared) orders like |x| (NaN above infinity,
    as torch.topk), so a radix select on it (kth_key) finds the k-th largest in two passes."""
    m = cand.size
    keys = np.empty(m, np.uint32)
    for i in range(m):
        keys[i] = bits[i] & np.uint32(0x7FFFFFFF)
    kth, above = kth_key(keys, k)
    ties = k - above     # entries equal to the k-th largest that are kept, lowest first
    j = 0
    for i in range(m):
        if keys[i] > kth or (keys[i] == kth and ties > 0):
            if keys[i] == kth:
                ties -= 1
            out[j] = cand[i]
            out_bits[j] = bits[i]
            j += 1
    return j


@njit(cache=True, nogil=True)
def zero_at(x, idx):
    """x[idx] = 0 for sorted positions (twice as fast as torch's index_fill_, measured)."""
    for i in range(idx.size):
        x[idx[i]] = 0


@njit(cache=True, nogil=True)   # no fastmath: x / count must round as torch's div_ does
def sparse_mean(idx, vals, offs, count, out):
    """Merge the sorted index lists idx[offs[p]:offs[p + 1]] of the packets p (values in
    vals alike) and write out[i] = (v_0 + v_1 + ...) / count once per listed position,
    added in packet order from 0 (or from packet 0's value itself, as the torch path puts
    it in place: so a -0.0 it sent stays -0.0). `out` is zero elsewhere already."""
    m = offs.size - 1
    heads = offs[:-1].copy()
    zero = count[0] - count[0]     # +0.0 of out's dtype (a literal 0 would widen float32)
    while True:
        pos = -1
        for p in range(m):
            if heads[p] < offs[p + 1] and (pos < 0 or idx[heads[p]] < pos):
                pos = idx[heads[p]]
        if pos < 0:
            return
        acc = zero
        for p in range(m):
            h = heads[p]
            if h < offs[p + 1] and idx[h] == pos:
                acc = vals[h] if p == 0 else acc + vals[h]
                heads[p] = h + 1
        out[pos] = acc / count[0]


@njit(cache=True, nogil=True)
def delta8_encode(idx, out):
    """The gaps of sorted unique `idx` as delta8 bytes (255: add 255, read on) into `out`."""
    prev = -1
    j = 0
    for i in range(idx.size):
        g = idx[i] - prev - 1
        prev = idx[i]
        while g >= 255:
            out[j] = 255
            j += 1
            g -= 255
        out[j] = g
        j += 1
    return j


@njit(cache=True, nogil=True)
def delta8_decode(data, k, numel, out):
    """Inverse of delta8_encode for untrusted bytes: returns 0, or -1 where the bytes do
    not hold exactly k positions in [0, numel) (never writes past out[k - 1])."""
    pos = -1
    gap = 0
    j = 0
    for i in range(data.size):
        b = data[i]
        if b == 255:
            gap += 255
            if gap >= numel:            # a gap past the end (also keeps gap small)
                return -1
        else:
            if j >= k:
                return -1
            pos += gap + b + 1
            if pos >= numel:
                return -1
            out[j] = pos
            j += 1
            gap = 0
    if j != k or gap != 0:              # too few positions, or the bytes end inside a gap
        return -1
    return 0



share_compiles(globals())   # processes starting together compile each loop once (milktea.numba_compile)
