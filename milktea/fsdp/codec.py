"""One destination's packets as one byte string, and back: the library's codecs, per parameter.

A row of FSDP2's buffer (one destination's share of every parameter of a module) goes
out as the parameters' packets laid end to end, each made by the copy of the compressor
kept for that parameter and destination (its own random stream, its own ledger). Pieces
smaller than `min_size` entries (biases, norms) go as they are (the library's "dense"
codec): their bytes are few, and a quantizer's per-block scale would cost as much.

    >>> from milktea import Quantize
    >>> from milktea.distributed.protocols import Protocol
    >>> coders = Protocol(Quantize(bits=8, chunk=64))
    >>> row = torch.linspace(-1, 1, 300)
    >>> payload = encode([row[:256], row[256:]], ["w", "b"], coders, ledger=False, min_size=100)
    >>> acc = torch.zeros(300)
    >>> add_into(payload, [acc[:256], acc[256:]])
    >>> float((acc - row).abs()[:256].max()) <= 1 / 127 / 2, bool(torch.equal(acc[256:], row[256:]))
    (True, True)
"""
from __future__ import annotations

import torch

from ..compressors import Identity
from ..compressors.registry import decode, decode_add
from ..packet import Packet

_DENSE = Identity()


def encode(views, keys, coders, *, ledger: bool, min_size: int) -> torch.Tensor:
    """The packets of `views` (tensors) end to end as one uint8 tensor; views[i] goes
    through coders.coder(keys[i]) (through its ledger when `ledger`), or as it is when
    it has fewer than `min_size` entries. An empty list gives an empty string."""
    packets = []
    for v, key in zip(views, keys):
        if v.numel() < min_size:
            packets.append(_DENSE.compress(v))
        elif ledger:
            packets.append(coders.ledger(key).step(coders.coder(key), v))
        else:
            packets.append(coders.coder(key).compress(v))
    device = views[0].device if views else torch.device("cpu")
    pieces = []
    for p in packets:                     # each packet as it crosses alone: header, then parts
        pieces.append(torch.frombuffer(bytearray(p.header()), dtype=torch.uint8))
        pieces.extend(p.parts)
    if not pieces:
        return torch.empty(0, dtype=torch.uint8, device=device)
    return torch.cat([q.to(device) for q in pieces])        # each packet's bytes written once


def _packets(payload: torch.Tensor, views):
    """Yield (packet, view) for each view, reading `payload` in order; every packet's
    shape must be its view's, and the payload must end with the last (hostile bytes)."""
    offset = 0
    for i, v in enumerate(views):
        if offset >= payload.numel():
            raise ValueError(f"truncated payload: {len(views)} packets expected, {i} found")
        packet = Packet.from_tensor(payload[offset:])
        if packet.shape != tuple(v.shape):
            raise ValueError(f"packet {i} has shape {packet.shape}, its place in the buffer is {tuple(v.shape)}")
        offset += packet.nbytes
        yield packet, v
    if offset != payload.numel():
        raise ValueError(f"payload has {payload.numel() - offset} bytes after its {len(views)} packets")


def add_into(payload: torch.Tensor, views) -> None:
    """views[i] += the i-th packet of `payload`, decoded (any float dtype: float32 for a sum)."""
    for packet, v in _packets(payload, views):
        decode_add(packet, v)


def decode_into(payload: torch.Tensor, views) -> None:
    """views[i] = the i-th packet of `payload`, decoded (in the packet's dtype)."""
    for packet, v in _packets(payload, views):
        decode(packet, out=v)
