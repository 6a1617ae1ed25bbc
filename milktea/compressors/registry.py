"""The codec registry: how the bytes of each codec's packets are read back into a tensor.

A packet names its codec (its header byte, see :mod:`milktea.packet`); this module maps
the name to the codec's decoder and optional fast paths, and runs them: `decode`,
`decode_add` (add into a buffer) and `decode_mean` (what an all-gather delivers). It
sits at the bottom of `milktea.compressors`, whose `__init__` imports every library
compressor module, each of which registers its codec here when it loads: whoever
imports this module (it imports its package first) finds every library codec in place.

A codec of your own, in your own file (an id from 64 to 255):

    >>> import torch
    >>> def decode_doubled(packet, out=None):                  # one float32 per entry, halved
    ...     expect_layout(packet, 0, 1)
    ...     expect_nbytes(packet, 0, 4 * packet.numel, "float32 values")
    ...     res = output(packet, out)
    ...     res.view(-1).copy_(from_bytes(packet.parts[0], torch.float32) / 2)
    ...     return res
    >>> register_codec("doubled", 99, decode_doubled, expansion=0.25)   # 4 bytes per entry
    Codec('doubled', id=99, expansion=0.25)
    >>> from milktea.packet import Packet
    >>> decode(Packet("doubled", (2,), torch.float32, (), (to_bytes(torch.tensor([2., 6.])),)))
    tensor([1., 3.])

(`expect_layout`, `expect_nbytes`, `output`, `from_bytes`, `to_bytes`: the decoder
helpers in :mod:`milktea.compressors.wire`.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .. import kernels
from ..packet import DTYPES, LIBRARY_CODECS, Packet, claim_id, codec_id
from .wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes  # noqa: F401  (the doctest's)


@dataclass(frozen=True)
class Codec:
    """How one codec's packets are read: its wire identity, decoder and fast paths.

    decode(packet, out=None) -> tensor, with `out` (when given) checked by the caller.
    add(packet, out, alpha): optional fused ``out += alpha * decode(packet)`` that
        needs no full-size temporary (see :func:`decode_add`).
    sparse(packet) -> (indices, values): optional, for codecs whose packets touch only
        the flat positions they list (sorted, unique, every size checked):
        :func:`decode_mean` then divides only those entries, not the whole tensor.
    add_divide(packet, out, count) -> bool: optional ``out = (out + decode(packet)) /
        count`` in one pass, for a mean's last packet, with the bits of the add then the
        division; False where it cannot (the caller adds, then divides).
    """
    name: str
    id: int
    expansion: float
    decode: Callable
    add: Callable | None = None
    sparse: Callable | None = None
    add_divide: Callable | None = None

    def __repr__(self) -> str:
        return f"Codec({self.name!r}, id={self.id}, expansion={self.expansion:g})"


_CODECS: dict[str, Codec] = {}


def _check_functions(decode, add, sparse, add_divide) -> None:
    if not callable(decode) or any(f is not None and not callable(f) for f in (add, sparse, add_divide)):
        raise TypeError("decode (and add, sparse and add_divide, if given) must be callables")


def register_codec(name: str, id: int, decode: Callable, *, expansion: float, add: Callable | None = None,
                   sparse: Callable | None = None, add_divide: Callable | None = None) -> Codec:
    """Make `name` a codec of your own: packets with header byte `id` (64 to 255; the ids
    below 64 are the library's) are read by `decode`.

    expansion: the most elements one payload byte of a valid packet stands for; derive it
        from your smallest packet per element (4 bytes per entry: 0.25; one bit per entry
        and a 4-byte scale: 8). It bounds what a hostile header can make a receiver
        allocate, so give the tightest value your format allows.
    add, sparse, add_divide: the optional fast paths (see :class:`Codec`).
    Registering the same name with the same id again replaces the functions (a module
    reloaded); a name or an id taken by another codec is refused.
    """
    _check_functions(decode, add, sparse, add_divide)
    wire = claim_id(name, id, expansion)
    codec = _CODECS[name] = Codec(name, wire.id, wire.expansion, decode, add, sparse, add_divide)
    return codec


def register_library_codec(name: str, decode: Callable, *, add: Callable | None = None,
                           sparse: Callable | None = None, add_divide: Callable | None = None) -> Codec:
    """What the library's own compressor modules call: their ids and size bounds are fixed
    by the wire format (:data:`milktea.packet.LIBRARY_CODECS`)."""
    _check_functions(decode, add, sparse, add_divide)
    wire = LIBRARY_CODECS[name]
    codec = _CODECS[name] = Codec(name, wire.id, wire.expansion, decode, add, sparse, add_divide)
    return codec


def get_codec(name: str) -> Codec:
    """The registered codec called `name` (ValueError naming the known ones otherwise)."""
    codec = _CODECS.get(name)
    if codec is None:
        codec_id(name)      # an unknown name: the wire format's error names the known ones
        raise ValueError(f"codec {name!r} has a wire id but no decoder: register it with register_codec")
    return codec


def decode(packet: Packet, out: torch.Tensor | None = None) -> torch.Tensor:
    """Turn any packet back into a tensor; the packet alone says how."""
    if not isinstance(packet, Packet):
        raise TypeError(f"decode needs a Packet, got {type(packet).__name__}")
    packet.check_size()
    if out is not None:
        _check_out(packet, out, same_dtype=True)
    return get_codec(packet.codec).decode(packet, out=out)


def decode_add(packet: Packet, out: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """out += alpha * decode(packet), in place, without a full-size temporary where the
    codec has a fused path. `out` may have any float dtype (e.g. a float32 ledger for a
    bfloat16 packet); returns `out`.

    >>> import milktea
    >>> acc = torch.zeros(4)
    >>> p = milktea.TopK(k=1).compress(torch.tensor([0.0, 2.0, 0.0, 1.0]))
    >>> decode_add(p, acc, alpha=0.5)
    tensor([0., 1., 0., 0.])
    """
    if not isinstance(packet, Packet):
        raise TypeError(f"decode_add needs a Packet, got {type(packet).__name__}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a number, got {alpha!r}")
    packet.check_size()
    _check_out(packet, out, same_dtype=False)
    codec = get_codec(packet.codec)
    if codec.add is not None:
        codec.add(packet, out, float(alpha))
    else:
        out.add_(codec.decode(packet, out=None).to(out.dtype), alpha=alpha)
    return out


def decode_mean(packets: Sequence[Packet], out: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
    """out = the mean of the decoded packets, in place: packet 0 decoded into out, the
    others added in order, divided by their count (what an all-gather delivers).

    Sparse packets (their codec registered `sparse`) are divided only where they put a
    value: zeros stay zero when divided, so the result has the same bits as dividing
    the whole tensor, for O(k) work instead of a pass over n entries. zeroed: the caller
    vouches that `out` holds zeros already, so sparse packets skip zeroing it.

    >>> import milktea
    >>> c = milktea.TopK(k=1)
    >>> decode_mean([c.compress(torch.tensor([0., 4, 1])), c.compress(torch.tensor([2., 0, 0]))],
    ...             out=torch.empty(3))
    tensor([1., 2., 0.])
    """
    if not packets:
        raise ValueError("decode_mean needs at least one packet")
    for p in packets:
        if not isinstance(p, Packet):
            raise TypeError(f"decode_mean needs Packets, got {type(p).__name__}")
    sparse = [get_codec(p.codec).sparse for p in packets]
    if not all(sparse):
        decode(packets[0], out=out)
        for p in packets[1:-1]:
            decode_add(p, out)
        if len(packets) > 1:
            last = packets[-1]
            fused = get_codec(last.codec).add_divide
            last.check_size()
            _check_out(last, out, same_dtype=False)
            if fused is not None and fused(last, out, len(packets)):
                return out        # added and divided in one pass
            decode_add(last, out)
        return out.div_(len(packets))
    pieces = []
    for i, (p, parts) in enumerate(zip(packets, sparse)):
        p.check_size()
        _check_out(p, out, same_dtype=i == 0)
        idx, vals = parts(p)        # sorted, unique, in range: the codec checked its bytes
        pieces.append((idx, vals.to(out.dtype)))
    if not zeroed:
        out.zero_()
    if kernels.sparse_mean(pieces, out):
        return out
    flat = out.view(-1)
    flat[pieces[0][0]] = pieces[0][1]       # as the codec's decode: the values put in place
    for idx, vals in pieces[1:]:            # as its add
        flat.index_add_(0, idx, vals)
    if len(pieces) > 1:
        where = torch.cat([idx for idx, _ in pieces])   # listed twice: the same quotient twice
        flat[where] = flat.index_select(0, where).div_(len(pieces))
    return out


def _check_out(packet: Packet, out, same_dtype: bool) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    ok_dtype = out.dtype == packet.dtype if same_dtype else out.dtype in DTYPES
    if tuple(out.shape) != tuple(packet.shape) or not ok_dtype:
        need = f"dtype {packet.dtype}" if same_dtype else "a float dtype"
        raise ValueError(f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the packet "
                         f"needs shape {packet.shape} and {need}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if out.device != packet.device:
        raise ValueError(f"out is on {out.device}, the packet on {packet.device}: give an out on "
                         f"{packet.device} (or move the packet there with Packet.from_bytes(..., device=...))")
