"""What a codec's decoder needs: bytes in and out, and checks of an untrusted packet.

A decoder receives a packet from the wire: every size in it is hostile until checked.
The pattern (see any compressor module, e.g. ``sign.py``)::

    def decode_mine(packet, out=None):
        expect_layout(packet, nparams=1, nparts=2)              # how many params and parts
        expect_nbytes(packet, 0, packed_size(packet.numel, 1), "sign bits")   # each part's length
        expect_nbytes(packet, 1, 4, "the float32 scale")
        scale = from_bytes(packet.parts[1], torch.float32)      # bytes as a dtype, no copy
        res = output(packet, out)                               # allocate only now
        ...                                                      # fill res
        return res

- :func:`expect_layout` / :func:`expect_nbytes`: ValueError naming the codec and what
  was expected, before anything is allocated;
- :func:`from_bytes` / :func:`to_bytes`: a part's bytes as values and back;
- :func:`output`: the tensor to write (`out`, checked, or a new one of the packet's
  shape and dtype);
- :func:`add_pieces`: a fused ``out += alpha * decode(packet)`` built from a decoder of
  slices, with a scratch of one piece instead of a full-size temporary.

The codec's `expansion` (given to register_codec) is the most elements one payload byte
of a valid packet can stand for: count your format's smallest payload for n entries, as
bytes b(n), and take n / b(n) at its largest (Sign: n / (n/8 + 4) < 8; 16-bit casts:
0.5; sparse packets: their values alone, SPARSE_EXPANSION). The header check refuses a
packet that declares more, so a generous value weakens that guard.
"""
from __future__ import annotations

import math

import torch

from .. import buffers
from ..kernels import TORCH_PIECE
from .packet import Packet


def to_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's raw bytes as a flat uint8 tensor (no copy when contiguous)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret packet bytes as `dtype` (copies only if misaligned)."""
    size = torch.empty((), dtype=dtype).element_size()
    if part.numel() % size:
        raise ValueError(f"a {dtype} field cannot be {part.numel()} bytes long")
    if part.storage_offset() % size:
        part = part.clone()
    return part.view(dtype)


def expect_layout(packet: Packet, nparams: int | tuple, nparts: int) -> None:
    """Check a packet has as many params and parts as its codec writes (ValueError if not)."""
    counts = (nparams,) if isinstance(nparams, int) else nparams
    if len(packet.params) not in counts or len(packet.parts) != nparts:
        raise ValueError(f"malformed {packet.codec} packet: {len(packet.params)} params and "
                         f"{len(packet.parts)} parts, expected {' or '.join(map(str, counts))} and {nparts}")


def expect_nbytes(packet: Packet, part: int, nbytes: int, what: str) -> None:
    have = packet.parts[part].numel()
    if have != nbytes:
        raise ValueError(f"malformed {packet.codec} packet: {what} take {have} bytes, expected {nbytes}")


def output(packet: Packet, out: torch.Tensor | None) -> torch.Tensor:
    """The tensor a decoder writes into: `out` if given (checked), else a new one.

    Decoders call this only after checking every size against the packet's bytes.
    """
    if out is None:
        return buffers.empty(packet.shape, packet.dtype, packet.device)
    if tuple(out.shape) != tuple(packet.shape) or out.dtype != packet.dtype:
        raise ValueError(f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the packet "
                         f"needs shape {packet.shape} and dtype {packet.dtype}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    return out


def flat_float32(t: torch.Tensor) -> torch.Tensor:
    """Flat float32 view or copy, for kernels that compute in float32."""
    t = t.reshape(-1)
    if t.dtype != torch.float32:
        t = t.float()
    return t if t.is_contiguous() else t.contiguous()


def chunk_step(chunk: int, limit: int = 4 * TORCH_PIECE) -> int | None:
    """A piece length for add_pieces that starts every piece on a chunk boundary and a byte
    boundary (>= TORCH_PIECE entries, a multiple of both `chunk` and 8), so a piece decodes
    with the codec's whole-tensor kernel on a slice of the codes and scales; None when such
    a piece would be longer than `limit` entries."""
    step = chunk * -(-TORCH_PIECE // chunk)
    step = step * 8 // math.gcd(step, 8)
    return step if step <= limit else None


def add_pieces(packet: Packet, out: torch.Tensor, piece, alpha: float, step: int = TORCH_PIECE) -> None:
    """out.view(-1)[s:e] += alpha * piece(s, e) for pieces of `step` entries (step % 8 == 0),
    so a decoder adds into `out` with a scratch of one piece, not of the whole tensor.

    Each piece is rounded to the packet's dtype first, so what is added is exactly what
    :func:`~milktea.compressors.decode` returns, whatever `out`'s dtype."""
    flat = out.view(-1)
    for s in range(0, packet.numel, step):
        e = min(s + step, packet.numel)
        flat[s:e].add_(piece(s, e).to(packet.dtype).to(out.dtype), alpha=alpha)


def _check_dense(packet: Packet, value_dtype: torch.dtype, nparams: int = 0) -> None:
    expect_layout(packet, nparams, 1)
    size = torch.empty((), dtype=value_dtype).element_size()
    expect_nbytes(packet, 0, packet.numel * size, f"{packet.numel} {value_dtype} values")


def dense_decode(packet: Packet, out, value_dtype: torch.dtype, nparams: int = 0):
    """Decode a packet whose one part holds every value as `value_dtype`."""
    _check_dense(packet, value_dtype, nparams)
    res = output(packet, out)
    res.view(-1).copy_(from_bytes(packet.parts[0], value_dtype))
    return res


def dense_add(packet: Packet, out, alpha: float, value_dtype: torch.dtype, nparams: int = 0):
    """out += alpha * values, read from the bytes piece by piece (no full-size copy even
    when the part sits at an odd offset in a received buffer)."""
    _check_dense(packet, value_dtype, nparams)
    size = torch.empty((), dtype=value_dtype).element_size()
    part = packet.parts[0]
    add_pieces(packet, out, lambda s, e: from_bytes(part[s * size:e * size], value_dtype), alpha)
