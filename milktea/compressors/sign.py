"""Sign compression (signSGD with a scale, as in EF-signSGD, Karimireddy et al. 2019).

One bit per entry (1 = negative) plus one float32 scale = mean |x| (summed in
float64), so the decoded tensor has the same L1 norm as the input. It is biased: use
it with ErrorFeedback.

Exact zeros, +0.0 and -0.0 alike, are sent as +scale: one bit cannot say "zero", and
the error they leave (scale) waits in the error-feedback ledger like any other.
Packet (codec ``sign``): no params, parts = (sign bits, float32 scale).
"""
from __future__ import annotations

import torch

from .. import kernels, trace
from ..bits import packed_size
from ..packet import Packet
from .base import Compressor
from .registry import register_library_codec
from .wire import add_pieces, expect_layout, expect_nbytes, flat_float32, from_bytes, output, to_bytes


class Sign(Compressor):
    """1 bit per entry plus a scale.

    >>> Sign().decompress(Sign().compress(torch.tensor([2.0, -1.0, 3.0, -2.0])))
    tensor([ 2., -2.,  2., -2.])
    """
    codec = "sign"
    protocol = "allgather"
    biased = True
    fast_paths = frozenset({"codec_mean", "fused_add"})

    @property
    def name(self) -> str:
        return "sign"

    def _compress(self, t):
        x = flat_float32(t)
        return self._packet(t, *kernels.sign_pack_l1(x))

    @staticmethod
    def _packet(t, bits, l1):
        scale = torch.tensor([l1 / t.numel()], dtype=torch.float32, device=t.device)
        return Packet("sign", tuple(t.shape), t.dtype, (), (bits, to_bytes(scale)))

    def compress_with_feedback(self, residual, dtype=None, grad=None, clear_grad=False):
        """As Compressor's, with the gradient's add and the packing in one pass over memory
        where the compiled loops run (float32 ledger and gradient): then a NaN or an
        infinity raises after the finite part of the sum reached the ledger, as Top-K's."""
        fused = (grad is not None and "fused_add" in self.fast_paths and self.nonfinite == "raise"
                 and dtype in (None, residual.dtype) and residual.is_contiguous()
                 and residual.dtype == torch.float32 and grad.dtype == torch.float32
                 and tuple(grad.shape) == tuple(residual.shape))
        got = kernels.add_sign_pack_l1(residual.view(-1), grad.detach()) if fused else None
        if got is None:
            return super().compress_with_feedback(residual, dtype, grad, clear_grad)
        if trace.ENABLED:
            trace.note(step="fused add")
        packet = self._packet(residual, *got)
        with torch.no_grad():
            _add_sign(packet, residual, -1.0)
            if clear_grad:
                grad.detach().zero_()
        return packet


def _scale_of(packet) -> float:
    expect_layout(packet, 0, 2)
    expect_nbytes(packet, 0, packed_size(packet.numel, 1), f"{packet.numel} sign bits")
    expect_nbytes(packet, 1, 4, "the float32 scale")
    return float(from_bytes(packet.parts[1], torch.float32)[0])


def _decode_sign(packet, out=None):
    scale = _scale_of(packet)
    res = output(packet, out)
    flat = res.view(-1) if res.dtype == torch.float32 else torch.empty(packet.numel, device=res.device)
    kernels.sign_unpack(packet.parts[0], scale, flat)
    if flat.data_ptr() != res.data_ptr():
        res.view(-1).copy_(flat)
    return res


def _add_sign(packet, out, alpha):
    scale = _scale_of(packet)
    if packet.dtype == torch.float32 and kernels.sign_unpack_add(packet.parts[0], scale, out, alpha):
        return     # one compiled pass: decode and add together

    def piece(s, e):   # s is a multiple of 8: the decoder's own kernel on a slice of the bits
        packed = packet.parts[0][s // 8: packed_size(e, 1)]
        return kernels.sign_unpack(packed, scale, torch.empty(e - s, device=packed.device))
    add_pieces(packet, out, piece, alpha)


def _add_divide_sign(packet, out, count):
    return packet.dtype == torch.float32 and \
        kernels.sign_unpack_add(packet.parts[0], _scale_of(packet), out, 1.0, count)


register_library_codec("sign", _decode_sign, add=_add_sign, add_divide=_add_divide_sign)
