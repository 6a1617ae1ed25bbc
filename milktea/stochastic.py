"""Stochastic rounding at memory speed: the random numbers and the codes of QSGD,
TernGrad and stochastic Quantize, in two versions that give the same bits.

Each call draws one 62-bit key from the compressor's torch.Generator (so a saved
generator state still resumes a run exactly); entry j's uniform is then 24 bits of a
hash of (key, j // 2): SplitMix64's output function, whose 64 bits serve two entries. A hash,
unlike a generator's stream, can be computed for every entry at once and in any order:
the compiled loop (milktea.numba_stochastic) draws, rounds and packs in one parallel pass
over the gradient, where torch.rand alone costs more than ten copies of it (Mersenne
Twister, one thread). The torch version here computes the same hash with int64 tensor
ops (they wrap as the 64-bit hash needs) and runs on any device.

QSGD's 2-norm is computed so that the order of the sum cannot change it: each |x| is put
on an integer grid of (62 - log2(chunk)) / 2 bits below the chunk's max, and the squares
of those integers are summed (see _grid_exponent).

>>> import torch
>>> u = uniforms(key=7, n=100_000)
>>> bool(u.min() >= 0) and bool(u.max() < 1) and abs(float(u.mean()) - 0.5) < 0.01
True
"""
from __future__ import annotations

import torch

from . import buffers, kernels
from .codes import compiled as _compiled, compiled_for as _jit   # the compiled loops, where they run
from .bits import pack, packed_size

LEVELS_L2, LEVELS_MAX, ABSMAX = 0, 1, 2     # QSGD, TernGrad, stochastic Quantize
BLOCK = 1 << 15                              # entries per parallel piece (numba_stochastic.BLOCK)


def _signed(u: int) -> int:
    return u - (1 << 64) if u >= 1 << 63 else u


GOLDEN, MIX1, MIX2 = (_signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def draw_key(gen: torch.Generator) -> int:
    """One 62-bit key for a call's uniforms, from (and advancing) the compressor's generator."""
    return int(torch.randint(0, 1 << 62, (1,), generator=gen))


def _lsr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic), as a new tensor."""
    t = z >> k
    t &= (1 << (64 - k)) - 1
    return t


def mix(key: int, n: int, start: int = 0, device=None) -> torch.Tensor:
    """SplitMix64's outputs for the states key + (j+1) * golden, j = start .. start + n - 1,
    as int64 bits (numba_stochastic.mix); in place, one temporary as large as the result."""
    z = torch.arange(start + 1, start + n + 1, dtype=torch.int64, device=device)
    z.mul_(GOLDEN).add_(_signed(key % (1 << 64)))
    for shift, factor in ((30, MIX1), (27, MIX2), (31, None)):
        z ^= _lsr(z, shift)
        if factor is not None:
            z.mul_(factor)
    return z


def uniforms(key: int, n: int, start: int = 0, device=None) -> torch.Tensor:
    """float32 uniforms in [0, 1) of entries start .. start + n - 1 under `key`: entry j
    takes a half of mix(key, j // 2), its top 24 bits for even j, bits 8 to 31 for odd j
    (one hash serves two entries)."""
    first = start >> 1
    z = mix(key, ((start + n + 1) >> 1) - first, first, device)
    pairs = torch.stack([_lsr(z, 40), _lsr(z, 8) & 0xFFFFFF], dim=1).view(-1)
    return pairs[start & 1: (start & 1) + n].float().mul_(2.0 ** -24)


def random_positions(n: int, k: int, key: int) -> torch.Tensor:
    """k distinct positions in [0, n) (n < 2**31), sorted, int64 on the CPU: the first k
    distinct values of the draws a % n, a = the top 32 bits of mix(key, j), skipping
    a >= (2**32 // n) * n so that every position is equally likely. The first k distinct
    draws of a uniform stream are a uniformly random k-subset.

    >>> random_positions(10, 3, key=5).tolist() == random_positions(10, 3, key=5).tolist()
    True
    """
    if not 1 <= k <= n < 1 << 31:
        raise ValueError(f"random_positions needs 1 <= k <= n < 2**31, got n={n}, k={k}")
    if kernels.jit(torch.empty(0), numel=n) is not None:
        import numpy as np
        out = torch.empty(k, dtype=torch.int64)
        _compiled().random_positions(n, k, np.uint64(key % (1 << 64)), np.zeros(n // 64 + 1, dtype=np.uint64),
                                     out.numpy())
        return out
    # about m^2 / 2n of m draws repeat: draw that many more, and a margin (if short, draw twice as many)
    limit, m = (1 << 32) // n * n, k + 2 * (k * k // n) + 1024
    while True:   # enough draws for k distinct ones: more of the same stream if not
        draws = mix(key, m)
        draws >>= 32
        draws &= 0xFFFFFFFF                                  # the top 32 bits, as a logical shift
        draws = draws[draws < limit]
        draws = draws.remainder_(n).to(torch.int32)          # n < 2**31: half the bytes to sort
        vals, order = torch.sort(draws, stable=True)        # ties keep the order they were drawn in
        del draws
        first = torch.ones_like(vals, dtype=torch.bool)
        torch.ne(vals[1:], vals[:-1], out=first[1:])
        if int(first.sum()) >= k:
            break
        m *= 2
    vals, when = vals[first], order[first]                   # the draw that first gave each value
    del order
    return vals[when <= torch.kthvalue(when, k).values].long()


def headroom(chunk: int) -> int:
    """Bits of each |x| on the grid, so that `chunk` squares sum below 2**62 in an int64."""
    return (62 - max(chunk - 1, 0).bit_length()) // 2


# QSGD's 2-norm, as numba_stochastic.encode computes it: each |x| put on an integer grid
# of `headroom` bits (|x| * 2**k, top * 2**k < 2**h, truncated), the squares summed as
# int64, the root scaled back; at least the max, at most cap, 0 for a zero chunk.
# Integers sum exactly, in any order (and over any steps), so the two agree to the bit.
def _grid_exponent(top: torch.Tensor, chunk: int) -> torch.Tensor:
    return headroom(chunk) - torch.frexp(top).exponent.long()


def _grid_squares(xp: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per row of xp, the int64 sum of the squares of its |x| * 2**k (k per row), truncated."""
    one = torch.ones(k.shape, dtype=torch.float64, device=xp.device)
    g1 = torch.ldexp(one, torch.div(k, 2, rounding_mode="floor")).float().unsqueeze(1)
    g2 = torch.ldexp(one, k - torch.div(k, 2, rounding_mode="floor")).float().unsqueeze(1)
    a = ((xp.abs() * g1) * g2).to(torch.int32).long()
    return a.mul_(a).sum(1)


def _root(squares: torch.Tensor, k: torch.Tensor, top: torch.Tensor, cap: float) -> torch.Tensor:
    one = torch.ones(k.shape, dtype=torch.float64, device=top.device)
    r = (torch.sqrt(squares.double()) * torch.ldexp(one, -k)).float()
    return torch.maximum(r, top).clamp_(max=cap)


def _sent(x: torch.Tensor, chunk: int, kind: int, s: int, cap: float) -> torch.Tensor:
    """Each chunk's norm or scale (float32), read a step of kernels.piece entries at a
    time: whole chunks per step, or, for longer chunks, each chunk in steps."""
    n, step = x.numel(), kernels.piece(x.device)
    width = min(chunk, n)

    def finish(top, pieces):   # pieces: the rows, or each one chunk's steps side by side
        if kind == ABSMAX:
            return (top / s).clamp_(max=cap)
        if kind == LEVELS_MAX:
            return top.clamp(max=cap)
        k = _grid_exponent(top, width)
        return _root(sum(_grid_squares(p, k) for p in pieces), k, top, cap)

    if chunk <= step:
        rows = max(1, step // chunk)
        parts = []
        for a in range(0, n, rows * chunk):
            b = min(a + rows * chunk, n)
            xp = torch.nn.functional.pad(x[a:b], (0, (a - b) % chunk)).view(-1, chunk)
            top = torch.linalg.vector_norm(xp, float("inf"), dim=1)
            parts.append(finish(top, [xp]))
        return torch.cat(parts)
    sent = []
    for c in range(0, n, chunk):
        pieces = [x[a:b].view(1, -1) for a, b in kernels.spans(min(chunk, n - c), x.device, c)]
        top = torch.stack([torch.linalg.vector_norm(p, float("inf"), dim=1) for p in pieces]).amax(0)
        sent.append(finish(top, pieces))
    return torch.cat(sent)


def _encode_torch(x, chunk, kind, s, key, bits, cap):
    n = x.numel()
    sent = _sent(x, chunk, kind, s, cap)
    div = torch.where(sent > 0, sent, 1.0)
    out = torch.empty(packed_size(n, bits), dtype=torch.uint8, device=x.device)
    for a, b in kernels.spans(n, x.device):   # a step's temporaries, not the gradient's; a is on a byte
        xa = x[a:b]
        d = div[torch.arange(a, b, device=x.device) // chunk]
        u = uniforms(key, b - a, start=a, device=x.device)
        if kind == ABSMAX:
            codes = (xa / d).add_(s + 1).add_(u).floor_().clamp_(1, 2 * s + 1)
        else:
            level = (xa.abs() / d).mul_(s).add_(u).floor_().clamp_(0, s)
            codes = torch.sign(xa) * level + s
        out[a * bits // 8: packed_size(b, bits)] = pack(codes.to(torch.uint8), bits)
    return out, sent


def encode(x: torch.Tensor, chunk: int, kind: int, s: int, key: int, bits: int, cap: float,
           out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed `bits`-bit codes, float32 per-chunk norms or scales) of flat float32 x.
    out: a uint8 tensor the compiled loop writes the codes into, from its start (the DDP
    hook's send buffer), where it has room.

    kind LEVELS_L2 (QSGD) / LEVELS_MAX (TernGrad): code = s + sign(x) * level, level in
    [0, s] rounded up with probability frac(|x| / norm * s); the norm is the chunk's
    2-norm or max |x|, at most cap. ABSMAX (stochastic Quantize, s = qmax): code =
    floor(x / scale + s + 1 + u) in [1, 2s + 1], scale = max|x| / s at most cap."""
    n = x.numel()
    nb = _jit(x, n, chunk, bits)
    if nb is None:
        return _encode_torch(x, chunk, kind, s, key, bits, cap)
    import numpy as np
    out = buffers.lend(out, packed_size(n, bits), x.device)
    sent = torch.empty(-(-n // chunk), dtype=torch.float32)
    nb.encode(x.detach().numpy(), chunk, kind, s, np.float32(cap), np.uint64(key), bits, out.numpy(), sent.numpy())
    return out, sent
