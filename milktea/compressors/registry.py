"""Reading packets back: `decode`, `decode_add` (into a buffer) and `decode_mean` (what an
all-gather delivers), each through the codec record the packet names (`codec.py`).

It sits at the bottom of `milktea.compressors`, whose `__init__` imports every library
compressor module, each of which ends with its codec's record (`library_codec`): whoever
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
    >>> decode(Packet("doubled", (2,), torch.float32, (), (to_bytes(torch.tensor([2., 6.])),)))
    tensor([1., 3.])

(`expect_layout`, `expect_nbytes`, `output`, `from_bytes`, `to_bytes`: the decoder
helpers in :mod:`milktea.compressors.wire`.)
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from .. import kernels
from .codec import _BY_NAME, Codec, lookup, register
from .packet import DTYPES, Packet
from .wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes  # noqa: F401  (the doctest's)


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
    expansion = float(expansion) if isinstance(expansion, int) and not isinstance(expansion, bool) else expansion
    return register(Codec(name, id, expansion, decode, add, sparse, add_divide))


def library_codec(cls: type, id: int, expansion: float, decode: Callable, *, add: Callable | None = None,
                  sparse: Callable | None = None, add_divide: Callable | None = None, rows: Callable | None = None,
                  cost: Callable | None = None, schemes: dict | None = None) -> Codec:
    """The record a library compressor module ends with: the class `cls` (its `codec` name,
    `protocol` and `biased`), its fixed wire id (below 64) and `expansion`, its decoders,
    what a packet costs and its named schemes (see :class:`Codec`)."""
    return register(Codec(cls.codec, id, float(expansion), decode, add, sparse, add_divide, rows, cls, cost,
                          dict(schemes or {})), library=True)


def get_codec(name: str) -> Codec:
    """The codec called `name` (ValueError naming the known ones otherwise)."""
    return lookup(name)


def decode(packet: Packet, out: torch.Tensor | None = None) -> torch.Tensor:
    """Turn any packet back into a tensor; the packet alone says how."""
    if not isinstance(packet, Packet):
        raise TypeError(f"decode needs a Packet, got {type(packet).__name__}")
    if out is not None:
        _check_out(packet, out, same_dtype=True)
    return lookup(packet.codec).decode(packet, out=out)


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
    _check_out(packet, out, same_dtype=False)
    codec = lookup(packet.codec)
    if codec.add is not None:
        codec.add(packet, out, float(alpha))
    else:
        out.add_(codec.decode(packet, out=None).to(out.dtype), alpha=alpha)
    return out


def decode_mean(packets: Sequence[Packet], out: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
    """out = the mean of the decoded packets, in place: packet 0 decoded into out, the
    others added in order, divided by their count (what an all-gather delivers).

    Sparse packets (their codec has `sparse`) are divided only where they put a value:
    zeros stay zero when divided, so the result has the same bits as dividing the whole
    tensor, for O(k) work instead of a pass over n entries. zeroed: the caller vouches
    that `out` holds zeros already, so sparse packets skip zeroing it.

    >>> import milktea
    >>> c = milktea.TopK(k=1)
    >>> decode_mean([c.compress(torch.tensor([0., 4, 1])), c.compress(torch.tensor([2., 0, 0]))],
    ...             out=torch.empty(3))
    tensor([1., 2., 0.])
    """
    if not packets:
        raise ValueError("decode_mean needs at least one packet")
    first = packets[0]
    if not isinstance(first, Packet):
        raise TypeError(f"decode_mean needs Packets, got {type(first).__name__}")
    codec = _BY_NAME.get(first.codec) or lookup(first.codec)
    for p in packets:
        if not isinstance(p, Packet):
            raise TypeError(f"decode_mean needs Packets, got {type(p).__name__}")
        if p.codec != first.codec:
            codec = None       # packets of several codecs: each decoded on its own
    rows = codec.rows(packets) if codec is not None and codec.rows is not None and len(packets) > 1 else None
    if codec is None or codec.sparse is None:
        if rows is not None:                # every packet decoded in one pass, then added in order
            _check_out(first, out, same_dtype=True)
            out.copy_(rows[0].view(out.shape))
            for r in rows[1:]:
                out.add_(r.view(out.shape))
            return out.div_(len(packets))
        decode(first, out=out)
        for p in packets[1:-1]:
            decode_add(p, out)
        if len(packets) > 1:
            last = packets[-1]
            fused = lookup(last.codec).add_divide
            _check_out(last, out, same_dtype=False)
            if fused is not None and fused(last, out, len(packets)):
                return out        # added and divided in one pass
            decode_add(last, out)
        return out.div_(len(packets))
    if rows is not None:                    # [W, k] positions and values, decoded in one pass
        _check_out(first, out, same_dtype=True)
        idx, vals = rows[0], rows[1].to(out.dtype)
        pieces = list(zip(idx, vals))
    else:
        _check_out(first, out, same_dtype=True)
        shape, device = first.shape, first.device
        pieces = []
        for p in packets:
            if p.shape != shape or p.device != device:
                _check_out(p, out, same_dtype=False)
            i, v = codec.sparse(p)        # sorted, unique, in range: the codec checked its bytes
            pieces.append((i, v if v.dtype == out.dtype else v.to(out.dtype)))
    if not zeroed:
        out.zero_()
    if kernels.sparse_mean(pieces, out):
        return out
    flat = out.view(-1)
    flat[pieces[0][0]] = pieces[0][1]       # as the codec's decode: the values put in place
    if rows is not None and out.device.type == "cpu":
        flat.index_add_(0, idx[1:].reshape(-1), vals[1:].reshape(-1))   # a CPU adds them in this order
    else:
        for i, v in pieces[1:]:             # as its add
            flat.index_add_(0, i, v)
    if len(pieces) > 1:
        where = idx.reshape(-1) if rows is not None else torch.cat([i for i, _ in pieces])
        flat[where] = flat.index_select(0, where).div_(len(pieces))   # listed twice: the same quotient twice
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
