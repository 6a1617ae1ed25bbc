"""Bit packing: n codes of `bits` bits each -> ceil(n * bits / 8) bytes.

Codes are unsigned integers stored in a uint8 tensor. Code j of a byte group sits
in bits [bits*j, bits*(j+1)) of its byte (little-endian bit order, like
``numpy.packbits(..., bitorder="little")`` for 1 bit).

The packers use multiply-shift tricks on a wider integer view so that each output
byte costs one multiply instead of one shift-or per code.
"""
from __future__ import annotations

import torch

from .checks import check_choice

SUPPORTED_BITS = (1, 2, 4, 8)

# For `per` codes of `bits` bits held one per byte in a little-endian integer,
# multiplying by MAGIC moves code j from bit 8j to bit TOP + bits*j, with no carries.
_MAGIC = {
    1: (torch.int64, 0x0102040810204080, 56),   # 8 codes per int64 -> top byte
    2: (torch.int32, 0x01041040, 24),           # 4 codes per int32 -> top byte
    4: (torch.int16, None, 0),                  # 2 codes per int16, done with shifts
}


def packed_size(n: int, bits: int) -> int:
    """Bytes needed for n codes of `bits` bits."""
    return (n * bits + 7) // 8


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes (each < 2**bits) into a uint8 tensor of packed_size bytes.

    >>> pack(torch.tensor([1, 0, 1, 1], dtype=torch.uint8), 1)
    tensor([13], dtype=torch.uint8)
    """
    check_choice(bits, SUPPORTED_BITS, "bits")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    codes = codes.reshape(-1)
    if bits == 8:
        return codes.contiguous()
    n = codes.numel()
    per = 8 // bits
    pad = (-n) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    if not codes.is_contiguous() or codes.storage_offset() % 8:
        codes = codes.clone()  # a wider view needs contiguous, aligned storage
    wide, magic, top = _MAGIC[bits]
    if per == 8 or per == 4:
        v = codes.view(wide)  # one wide word holds exactly `per` codes
        out = (v * magic) >> top
        return out.to(torch.uint8)  # keeps the low byte (wraps), which is the packed one
    # bits == 4: two codes per int16 v = c0 + 256*c1  ->  c0 | c1 << 4
    v = codes.view(torch.int16)
    out = (v | (v >> 4)) & 0xFF
    return out.to(torch.uint8)


def unpack(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack`: the first n codes as a uint8 tensor."""
    check_choice(bits, SUPPORTED_BITS, "bits")
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be uint8, got {packed.dtype}")
    if packed.numel() < packed_size(n, bits):
        raise ValueError(f"{packed.numel()} bytes cannot hold {n} codes of {bits} bits "
                         f"(need {packed_size(n, bits)})")
    packed = packed.reshape(-1)
    if bits == 8:
        return packed[:n]
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    codes = (packed[: packed_size(n, bits)].unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:n]


def pack_rows(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`pack` of each row of [W, n] uint8 codes: [W, packed_size(n, bits)], each row's bytes
    what `pack` gives for it (its last byte padded with zeros), in one pass.

    >>> pack_rows(torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.uint8), 1)
    tensor([[5],
            [6]], dtype=torch.uint8)
    """
    W, n = codes.shape
    pad = (-n) % (8 // bits)
    if pad:
        codes = torch.cat([codes, codes.new_zeros(W, pad)], 1)
    return pack(codes.reshape(-1), bits).view(W, -1)


def unpack_rows(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_rows`: [W, n] codes of [W, bytes] packed rows."""
    W, nb = packed.shape
    return unpack(packed.reshape(-1), bits, W * nb * (8 // bits)).view(W, -1)[:, :n]
