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

from .. import kernels
from ..bits import pack, unpack
from ..checks import check_choice, check_positive_int
from ..packet import Packet, register_decoder
from .base import Compressor, flat_float32, from_bytes, output, to_bytes

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
        self.bits = check_choice(bits, QUANT_BITS, "bits")
        self.chunk = None if chunk is None else check_positive_int(chunk, "chunk")
        self.stochastic = bool(stochastic)
        self.seed = seed
        self._gen = torch.Generator().manual_seed(seed)
        self.biased = not self.stochastic

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1

    @property
    def name(self) -> str:
        return f"int{self.bits}" + ("-stoch" if self.stochastic else "")

    def _repr_args(self):
        return {"bits": self.bits, "chunk": self.chunk, "stochastic": self.stochastic}

    def _compress(self, t):
        x = flat_float32(t)
        n = x.numel()
        chunk = _chunks(n, self.chunk)
        if self.stochastic:
            codes, scales = self._stochastic(x, chunk)
            packed = pack(codes, self.bits)
        else:
            packed, scales = kernels.quantize_packed(x, chunk, self.bits)
        return Packet("quant", tuple(t.shape), t.dtype, (self.bits, chunk, int(self.stochastic)),
                      (packed, to_bytes(scales)))

    def _stochastic(self, x, chunk):
        n, q = x.numel(), self.qmax
        pad = (-n) % chunk
        xp = torch.nn.functional.pad(x, (0, pad)).view(-1, chunk)
        m = torch.linalg.vector_norm(xp, float("inf"), dim=1)
        scales = m / q
        u = torch.rand(xp.shape, generator=self._gen).to(x.device)
        y = xp * (q / m.clamp_min(1e-38)).unsqueeze(1) + (q + 1) + u
        codes = y.floor_().clamp_(1, 2 * q + 1).to(torch.uint8).reshape(-1)[:n]
        return codes, scales


def _decode_quant(packet, out=None):
    bits, chunk, _ = packet.params
    res = output(packet, out)
    n = packet.numel
    scales = from_bytes(packet.parts[1], torch.float32)
    if scales.numel() != (n + chunk - 1) // chunk:
        raise ValueError(f"quant packet has {scales.numel()} scales, expected {(n + chunk - 1) // chunk}")
    if packet.parts[0].numel() != (n * bits + 7) // 8:
        raise ValueError(f"quant packet has {packet.parts[0].numel()} code bytes, expected {(n * bits + 7) // 8}")
    flat = res.view(-1) if res.dtype == torch.float32 else torch.empty(n, device=res.device)
    kernels.dequantize_packed(packet.parts[0], scales, chunk, bits, flat)
    if flat.data_ptr() != res.data_ptr():
        res.view(-1).copy_(flat)
    return res


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
        self.seed = seed
        self._gen = torch.Generator().manual_seed(seed)

    @property
    def name(self) -> str:
        return f"qsgd-{self.levels}"

    def _repr_args(self):
        return {"levels": self.levels, "chunk": self.chunk}

    def _compress(self, t):
        x = flat_float32(t)
        n, s = x.numel(), self.levels
        chunk = _chunks(n, self.chunk)
        xp = torch.nn.functional.pad(x, (0, (-n) % chunk)).view(-1, chunk)
        norms = torch.linalg.vector_norm(xp, self.ord, dim=1)
        u = torch.rand(xp.shape, generator=self._gen).to(x.device)
        level = (xp.abs() * (s / norms.clamp_min(1e-38)).unsqueeze(1) + u).floor_().clamp_(0, s)
        codes = (torch.sign(xp) * level + s).to(torch.uint8).reshape(-1)[:n]
        return Packet(self.codec, tuple(t.shape), t.dtype, (s, self.bits, chunk),
                      (pack(codes, self.bits), to_bytes(norms)))


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


def _decode_levels(packet, out=None):
    s, bits, chunk = packet.params
    res = output(packet, out)
    n = packet.numel
    codes = unpack(packet.parts[0], bits, n)
    norms = from_bytes(packet.parts[1], torch.float32)
    steps = (norms / s).repeat_interleave(chunk)[:n]
    res.view(-1).copy_((codes.float() - s) * steps)
    return res


register_decoder("quant", _decode_quant)
register_decoder("qsgd", _decode_levels)
register_decoder("terngrad", _decode_levels)
