"""Sign compression (signSGD with a scale, as in EF-signSGD, Karimireddy et al. 2019).

One bit per entry (1 = negative) plus one float32 scale = mean |x|, so the decoded
tensor has the same L1 norm as the input. It is biased: use it with ErrorFeedback.
"""
from __future__ import annotations

import torch

from .. import kernels
from ..packet import Packet, register_decoder
from .base import Compressor, flat_float32, from_bytes, output, to_bytes


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

    def _compress(self, t):
        x = flat_float32(t)
        bits, l1 = kernels.sign_pack_l1(x)
        scale = torch.tensor([l1 / x.numel()], dtype=torch.float32, device=x.device)
        return Packet("sign", tuple(t.shape), t.dtype, (), (bits, to_bytes(scale)))


def _decode_sign(packet, out=None):
    res = output(packet, out)
    scale = float(from_bytes(packet.parts[1], torch.float32)[0])
    flat = res.view(-1) if res.dtype == torch.float32 else torch.empty(packet.numel, device=res.device)
    kernels.sign_unpack(packet.parts[0], scale, flat)
    if flat.data_ptr() != res.data_ptr():
        res.view(-1).copy_(flat)
    return res


register_decoder("sign", _decode_sign)
