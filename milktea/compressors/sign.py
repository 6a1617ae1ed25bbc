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
from ..bits import pack_rows, packed_size, unpack_rows
from .base import Compressor
from .packet import Packet
from .registry import library_codec
from .wire import add_pieces, expect_layout, expect_nbytes, flat_float32, from_bytes, output, to_bytes


class Sign(Compressor):
    """1 bit per entry plus a scale.

    >>> Sign().decompress(Sign().compress(torch.tensor([2.0, -1.0, 3.0, -2.0])))
    tensor([ 2., -2.,  2., -2.])
    """
    codec = "sign"
    protocol = "allgather"
    biased = True

    @property
    def name(self) -> str:
        return "sign"

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """A packet per row; with `add` (error feedback), the add and the packing in one pass
        over memory where the compiled loops run (float32 rows and add, a NaN raising: then
        after the finite part of the sum reached the rows, as Top-K's); row 0's bits written
        into `into` where one is lent."""
        W, n = rows.shape[0], rows[0].numel()
        if W > 1 and n <= kernels.TORCH_PIECE and not kernels.would_use_numba(n, rows.device):
            return self._encode_together(rows, add, clear_add)
        packets = []
        for w in range(W):
            x, g = rows[w].reshape(-1), add[w].reshape(-1) if add is not None else None
            got = None
            if (g is not None and self.nonfinite == "raise" and rows.is_contiguous()
                    and x.dtype == torch.float32 and g.dtype == torch.float32):
                got = kernels.add_sign_pack_l1(x, g.detach(), out=into if w == 0 else None)
                if got is not None and trace.ENABLED:
                    trace.note(step="fused add")
                if got is not None and clear_add:
                    g.detach().zero_()
            if got is None:
                if g is not None:
                    self._add(x, g, clear_add)
                got = kernels.sign_pack_l1(flat_float32(x), out=into if w == 0 else None)
            packets.append(self._packet(rows[w], *got))
        return packets, [None] * rows.shape[0]

    def _encode_together(self, rows, add, clear_add):
        """Rows too small for the compiled loops: their sign bits packed in one pass (each
        row's l1 summed on its own, as `kernels.sign_pack_l1` sums it)."""
        if add is not None:
            self._add(rows, add, clear_add)
        W = rows.shape[0]
        X = rows.reshape(W, -1)
        X = X if X.dtype == torch.float32 else X.float()
        bits = pack_rows((X < 0).view(torch.uint8), 1)
        return [self._packet(rows[w], bits[w], float(X[w].abs().sum(dtype=torch.float64))) for w in range(W)], \
            [None] * W

    def _compress(self, t):
        return self._packet(t, *kernels.sign_pack_l1(flat_float32(t)))

    @staticmethod
    def _packet(t, bits, l1):
        scale = torch.tensor([l1 / t.numel()], dtype=torch.float32, device=t.device)
        return Packet("sign", tuple(t.shape), t.dtype, (), (bits, to_bytes(scale)))


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


def _sign_rows(packets):
    """Several sign packets of one tensor (too small for the compiled loops) decoded in one
    pass: [W, n] values, each row what `decode` gives; None otherwise."""
    first = packets[0]
    n = first.numel
    if kernels.would_use_numba(n, first.device) or any(p.shape != first.shape or p.dtype != first.dtype
                                                        for p in packets):
        return None
    scales = torch.tensor([_scale_of(p) for p in packets], dtype=torch.float32, device=first.device)
    bits = unpack_rows(torch.stack([p.parts[0] for p in packets]), 1, n)
    values = kernels.sign_values(bits, scales.unsqueeze(1), torch.empty(bits.shape, device=first.device))
    return values.to(first.dtype)


def _add_divide_sign(packet, out, count):
    return packet.dtype == torch.float32 and \
        kernels.sign_unpack_add(packet.parts[0], _scale_of(packet), out, 1.0, count)


def _sign_cost(compressor, shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return packed_size(n, 1) + 4


SIGN = library_codec(Sign, 6, 8.0, _decode_sign, add=_add_sign, add_divide=_add_divide_sign, rows=_sign_rows,
                     cost=_sign_cost,
                     schemes={"sign": ("Sign+EF", lambda ratio, rank: Sign(), True)})
