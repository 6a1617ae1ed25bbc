"""Quantizers: write every number with fewer bits.

``Quantize`` (absmax): per chunk of `chunk` entries, scale = max|x| / qmax with
qmax = 2**(bits-1) - 1; each entry becomes the integer level round(x / scale) in
[-qmax, qmax], sent as a `bits`-bit code; the receiver multiplies back. Error per
entry <= scale / 2 (half a step). With ``stochastic=True`` the rounding goes up with
probability equal to the fractional part, which makes the quantizer unbiased.

``QSGD`` and ``TernGrad``: stochastic levels relative to a norm (2-norm for QSGD,
max-norm for TernGrad), unbiased by construction.

Packet (codec ``quant``): params = (bits, chunk, stochastic), parts = (packed codes,
float32 scales). Codec ``qsgd``/``terngrad``: params = (levels, bits, chunk),
parts = (packed codes, float32 norms).
"""
from __future__ import annotations

import torch

from .. import codes, kernels, stochastic
from ..bits import pack_rows, packed_size, unpack, unpack_rows
from ..checks import check_choice, check_int, check_positive_int, check_seed
from .base import Compressor
from .packet import Packet
from .registry import library_codec
from .wire import (add_pieces, chunk_step, expect_layout, expect_nbytes, flat_float32, from_bytes, output,
                   to_bytes)

#: Norms saturate here (half of float32's largest value), so that norm / levels * levels
#: cannot round past the largest float32 when decoded (see QSGD).
NORM_MAX = float(torch.finfo(torch.float32).max) / 2

QUANT_BITS = (8, 4, 2)


def _chunks(n: int, chunk: int | None) -> int:
    return n if chunk is None else min(chunk, n)


class Quantize(Compressor):
    """Absmax quantization to 8, 4 or 2 bits with one scale per chunk.

    >>> q = Quantize(bits=8)
    >>> x = torch.tensor([0.5, -1.0, 0.25])
    >>> (q.decompress(q.compress(x)) - x).abs().max() <= 1.0 / 127 / 2
    tensor(True)

    bits: 8, 4 or 2 (2 bits = three levels -1, 0, +1 times the scale).
    chunk: entries sharing one scale (None: one scale for the whole tensor).
    stochastic: unbiased stochastic rounding instead of round-to-nearest.
    """
    codec = "quant"
    protocol = "allgather"

    def __init__(self, bits: int = 8, chunk: int | None = 1024, stochastic: bool = False,
                 seed: int = 0, nonfinite: str = "raise"):
        super().__init__(nonfinite)
        self.bits = check_choice(check_int(bits, "bits"), QUANT_BITS, "bits")
        self.chunk = None if chunk is None else check_positive_int(chunk, "chunk")
        self.stochastic = bool(stochastic)
        self.seed = check_seed(seed)
        self._gen = torch.Generator().manual_seed(self.seed)
        self.biased = not self.stochastic

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1

    @property
    def name(self) -> str:
        return f"int{self.bits}" + ("-stoch" if self.stochastic else "")

    def _repr_args(self):
        return {"bits": self.bits, "chunk": self.chunk, "stochastic": self.stochastic}

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """A packet per row; row 0's codes written into `into` where one is lent. Rows too
        small for the compiled loops, whose chunks and codes end with them, rounded to
        nearest: quantized in one pass, as one tensor of their chunks."""
        W, n = rows.shape[0], rows[0].numel()
        if W > 1 and not self.stochastic and not kernels.would_use_numba(n, rows.device):
            if add is not None:
                self._add(rows, add, clear_add)
            chunk = _chunks(n, self.chunk)
            X = rows.reshape(W, n)
            codes, scales = _by_chunks(X if X.dtype == torch.float32 else X.float(), chunk,
                                       lambda x, c: kernels.quantize(x, c, self.qmax))
            packed = codes if self.bits == 8 else pack_rows(codes, self.bits)
            return [Packet("quant", tuple(rows.shape[1:]), rows.dtype, (self.bits, chunk, 0),
                           (packed[w], to_bytes(scales[w]))) for w in range(W)], [None] * W
        coders = self.rows(rows.shape[0])
        if add is not None:
            self._add(rows, add, clear_add)
        return [c._compress(x, into if w == 0 else None) for w, (c, x) in enumerate(zip(coders, rows))], \
            [None] * rows.shape[0]

    def _compress(self, t, into=None):
        x = flat_float32(t)
        n = x.numel()
        chunk = _chunks(n, self.chunk)
        if self.stochastic:
            key = stochastic.draw_key(self._gen)
            packed, scales = stochastic.encode(x, chunk, stochastic.ABSMAX, self.qmax, key, self.bits,
                                               kernels.scale_cap(self.qmax), out=into)
        else:
            packed, scales = kernels.quantize_packed(x, chunk, self.bits, out=into)
        return Packet("quant", tuple(t.shape), t.dtype, (self.bits, chunk, int(self.stochastic)),
                      (packed, to_bytes(scales)))


def _quant_layout(packet):
    """(bits, chunk) of a quant packet, every size checked against its bytes."""
    expect_layout(packet, 3, 2)
    bits, chunk, stochastic = packet.params
    n = packet.numel
    if bits not in QUANT_BITS or chunk < 1 or stochastic > 1:
        raise ValueError(f"malformed quant packet: bits={bits}, chunk={chunk}, stochastic={stochastic} "
                         f"(bits must be one of {QUANT_BITS}, chunk >= 1, stochastic 0 or 1)")
    chunk = min(chunk, n)                   # one chunk is the whole tensor at most
    expect_nbytes(packet, 0, packed_size(n, bits), f"{n} codes of {bits} bits")
    expect_nbytes(packet, 1, 4 * (-(-n // chunk)), f"the float32 scales of {-(-n // chunk)} chunks")
    return bits, chunk


def _decode_quant(packet, out=None):
    bits, chunk = _quant_layout(packet)
    res = output(packet, out)
    scales = from_bytes(packet.parts[1], torch.float32)
    flat = res.view(-1) if res.dtype == torch.float32 else torch.empty(packet.numel, device=res.device)
    codes.dequantize_packed(packet.parts[0], scales, chunk, bits, flat)
    if flat.data_ptr() != res.data_ptr():
        res.view(-1).copy_(flat)
    return res


def _by_chunks(X: torch.Tensor, chunk: int, fn):
    """fn(flat, chunk) -> (per-entry result, per-chunk result) applied to every row of
    X [W, n] at once: the rows' whole chunks as one tensor, then their last, shorter
    chunks as another (each chunk on its own: the same bits as row by row)."""
    W, n = X.shape
    full = n - n % chunk
    outs = []
    if full:
        outs.append(tuple(r.view(W, -1) for r in fn(X[:, :full].reshape(-1), chunk)))
    if full < n:
        outs.append(tuple(r.view(W, -1) for r in fn(X[:, full:].reshape(-1), n - full)))
    return tuple(torch.cat(parts, 1) if len(parts) > 1 else parts[0] for parts in zip(*outs))


def _quant_rows(packets):
    """Several quant packets of one tensor (too small for the compiled loops) decoded in one
    pass: [W, n] values, each row what `decode` gives; None otherwise."""
    first = packets[0]
    if kernels.would_use_numba(first.numel, first.device) or any(
            p.shape != first.shape or p.dtype != first.dtype or p.params != first.params for p in packets):
        return None
    bits, chunk = _quant_layout(first)
    for p in packets[1:]:
        _quant_layout(p)
    n, W = first.numel, len(packets)
    packed = torch.stack([p.parts[0] for p in packets])
    codes = packed if bits == 8 else unpack_rows(packed, bits, n)
    scales = torch.stack([from_bytes(p.parts[1], torch.float32) for p in packets])
    values, full, qmax = torch.empty(W, n, device=first.device), n - n % chunk, 2 ** (bits - 1) - 1
    for a, b, c in ((0, full, chunk), (full, n, n - full)):      # the whole chunks, then the last
        if a < b:
            out = torch.empty(W * (b - a), device=first.device)
            s = scales[:, a // chunk: a // chunk + (b - a) // c]
            values[:, a:b] = kernels.dequantize(codes[:, a:b].reshape(-1), s.reshape(-1), c, qmax, out).view(W, -1)
    return values.to(first.dtype)


def _levels_piece(packet, bits, chunk, steps, offset, levels=None):
    """piece(s, e) for add_pieces: float32 (code - offset) * steps[chunk of each entry]
    (levels: each code checked to be at most 2 * levels)."""
    def piece(s, e):
        # pieces start at multiples of 8 entries, so on a byte boundary for 1, 2, 4 or 8 bits
        got = unpack(packet.parts[0][s * bits // 8: packed_size(e, bits)], bits, e - s)
        if levels is not None:
            _checked_levels(packet, got, levels)
        which = torch.arange(s, e, device=got.device) // chunk
        return (got.float() - offset) * steps[which]
    return piece


def _add_quant(packet, out, alpha):
    bits, chunk = _quant_layout(packet)
    scales = from_bytes(packet.parts[1], torch.float32)
    if packet.dtype == torch.float32 and codes.dequantize_add(packet.parts[0], scales, chunk, bits, out, alpha):
        return     # one compiled pass: decode and add together
    step = chunk_step(chunk)
    if step is None:   # chunks longer than a scratch should be: entry by entry
        return add_pieces(packet, out, _levels_piece(packet, bits, chunk, scales, 2 ** (bits - 1)), alpha)

    def piece(s, e):   # whole chunks from a byte boundary: the decoder's own kernel on a slice
        part = packet.parts[0][s * bits // 8: packed_size(e, bits)]
        scratch = torch.empty(e - s, device=part.device)
        return codes.dequantize_packed(part, scales[s // chunk: -(-e // chunk)], chunk, bits, scratch)
    add_pieces(packet, out, piece, alpha, step)


def _level_bits(levels: int) -> int:
    for b in QUANT_BITS[::-1]:
        if 2 * levels + 1 <= 2 ** b:
            return b
    raise ValueError(f"levels must be at most 127, got {levels}")


class QSGD(Compressor):
    """QSGD (Alistarh et al. 2017): unbiased stochastic quantization to `levels` levels.

    Each entry becomes norm * sign(x) * l / levels with l in {0..levels} chosen at
    random so that the expectation is x. The variance is at most
    min(n / levels**2, sqrt(n) / levels) * ||x||^2 (checked by the tests).

    >>> p = QSGD(levels=4).compress(torch.randn(100))
    >>> p.params[:2]   # 4 levels each side fit in 4-bit codes
    (4, 4)
    """
    codec = "qsgd"
    protocol = "allgather"
    ord = 2.0
    stochastic = True

    def __init__(self, levels: int = 4, chunk: int | None = 512, seed: int = 0, nonfinite: str = "raise"):
        super().__init__(nonfinite)
        self.levels = check_positive_int(levels, "levels")
        self.bits = _level_bits(self.levels)
        self.chunk = None if chunk is None else check_positive_int(chunk, "chunk")
        self.seed = check_seed(seed)
        self._gen = torch.Generator().manual_seed(self.seed)

    @property
    def name(self) -> str:
        return f"qsgd-{self.levels}"

    def _repr_args(self):
        return {"levels": self.levels, "chunk": self.chunk}

    def _compress(self, t):
        x = flat_float32(t)
        n, s = x.numel(), self.levels
        chunk = _chunks(n, self.chunk)
        if self.ord == 2.0:   # any norm >= max|x| keeps the levels unbiased; capped so they decode finite
            kind, cap = stochastic.LEVELS_L2, min(NORM_MAX, torch.finfo(t.dtype).max)
        else:
            kind, cap = stochastic.LEVELS_MAX, float("inf")
        packed, norms = stochastic.encode(x, chunk, kind, s, stochastic.draw_key(self._gen), self.bits, cap)
        return Packet(self.codec, tuple(t.shape), t.dtype, (s, self.bits, chunk), (packed, to_bytes(norms)))


class TernGrad(QSGD):
    """TernGrad (Wen et al. 2017): each entry becomes -m, 0 or +m (m = max|x|), unbiased.

    >>> TernGrad().compress(torch.randn(10_000)).ratio > 15   # 2 bits per entry
    True
    """
    codec = "terngrad"
    protocol = "allgather"
    ord = float("inf")

    def __init__(self, chunk: int | None = None, seed: int = 0, nonfinite: str = "raise"):
        super().__init__(levels=1, chunk=chunk, seed=seed, nonfinite=nonfinite)

    @property
    def name(self) -> str:
        return "terngrad"

    def _repr_args(self):
        return {"chunk": self.chunk}


def _levels_layout(packet):
    """(levels, bits, chunk) of a qsgd/terngrad packet, every size checked against its bytes."""
    expect_layout(packet, 3, 2)
    s, bits, chunk = packet.params
    if not 1 <= s <= 127 or chunk < 1 or bits != _level_bits(s):
        raise ValueError(f"malformed {packet.codec} packet: levels={s}, bits={bits}, chunk={chunk} "
                         f"(levels in [1, 127] take {_level_bits(min(max(s, 1), 127))} bits; chunk >= 1)")
    n = packet.numel
    chunk = min(chunk, n)
    expect_nbytes(packet, 0, packed_size(n, bits), f"{n} codes of {bits} bits")
    expect_nbytes(packet, 1, 4 * (-(-n // chunk)), f"the float32 norms of {-(-n // chunk)} chunks")
    return s, bits, chunk


def _check_level_codes(packet, s, bits):
    """Every code of a qsgd/terngrad packet checked to be a level in [0, 2 * levels],
    a step of the codes at a time (one device sync)."""
    top = torch.zeros((), dtype=torch.uint8, device=packet.parts[0].device)
    for a, b in kernels.spans(packet.numel, top.device):   # a is a multiple of 8: on a byte
        top = torch.maximum(top, unpack(packet.parts[0][a * bits // 8: packed_size(b, bits)], bits, b - a).max())
    _checked_levels(packet, top, s)


def _checked_levels(packet, codes, s):
    top = int(codes.max())
    if top > 2 * s:
        raise ValueError(f"malformed {packet.codec} packet: a code is {top}, above 2 * levels = {2 * s}")
    return codes


def _decode_levels(packet, out=None):
    s, bits, chunk = _levels_layout(packet)
    res = output(packet, out)
    steps = from_bytes(packet.parts[1], torch.float32) / s
    flat = res.view(-1) if res.dtype == torch.float32 else torch.empty(packet.numel, device=res.device)
    if not codes.decode(packet.parts[0], steps, chunk, s, bits, flat, allowed=2 * s, what=packet.codec):
        _check_level_codes(packet, s, bits)   # all of them first: a malformed packet writes nothing
        piece = _levels_piece(packet, bits, chunk, steps, s)
        for a, b in kernels.spans(packet.numel, flat.device):
            flat[a:b] = piece(a, b)
    if flat.data_ptr() != res.data_ptr():
        res.view(-1).copy_(flat)
    return res


def _add_levels(packet, out, alpha):
    s, bits, chunk = _levels_layout(packet)
    steps = from_bytes(packet.parts[1], torch.float32) / s
    if packet.dtype == torch.float32 and alpha in (1.0, -1.0) and codes.decode(
            packet.parts[0], steps, chunk, s, bits, out, -1 if alpha < 0 else 1, allowed=2 * s, what=packet.codec):
        return     # one compiled pass: check, decode and add
    add_pieces(packet, out, _levels_piece(packet, bits, chunk, steps, s, levels=s), alpha)


def _add_divide_levels(packet, out, count):
    s, bits, chunk = _levels_layout(packet)
    steps = from_bytes(packet.parts[1], torch.float32) / s
    return packet.dtype == torch.float32 and codes.decode(packet.parts[0], steps, chunk, s, bits, out, 1,
                                                               count, allowed=2 * s, what=packet.codec)


def _add_divide_quant(packet, out, count):
    bits, chunk = _quant_layout(packet)
    return packet.dtype == torch.float32 and codes.dequantize_add(
        packet.parts[0], from_bytes(packet.parts[1], torch.float32), chunk, bits, out, 1.0, count)


def _codes_cost(compressor, shape, dtype) -> int:
    """Packed codes and one float32 scale (or norm) per chunk."""
    n = 1
    for d in shape:
        n *= d
    return packed_size(n, compressor.bits) + 4 * -(-n // _chunks(n, compressor.chunk))


QUANT = library_codec(Quantize, 3, 4.0, _decode_quant, add=_add_quant, add_divide=_add_divide_quant,
                      rows=_quant_rows, cost=_codes_cost, schemes={
                          "int8": ("int8", lambda ratio, rank: Quantize(8), False),
                          "int4": ("int4 stochastic", lambda ratio, rank: Quantize(4, stochastic=True), False)})
QSGD_CODEC = library_codec(QSGD, 4, 4.0, _decode_levels, add=_add_levels, add_divide=_add_divide_levels,
                           cost=_codes_cost, schemes={"qsgd": ("QSGD-4", lambda ratio, rank: QSGD(4), False)})
TERNGRAD = library_codec(TernGrad, 5, 4.0, _decode_levels, add=_add_levels, add_divide=_add_divide_levels,
                         cost=_codes_cost, schemes={"terngrad": ("TernGrad", lambda ratio, rank: TernGrad(), False)})
