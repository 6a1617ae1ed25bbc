"""Packet: exactly what one worker puts on the wire for one tensor.

Layout (all integers are LEB128 varints unless noted)::

    b"MT"  version:u8  codec:u8  dtype:u8
    ndim  dims...  nparams  params...  nparts  part_lengths...
    part bytes, one after another

`packet.nbytes` is the length of that byte string, header included, computed
without building it; tests check it equals ``len(packet.to_bytes())``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

MAGIC = b"MT"
VERSION = 1

CODECS = {"dense": 0, "topk": 1, "randomk": 2, "quant": 3, "qsgd": 4, "terngrad": 5,
          "sign": 6, "cast": 7, "powersgd": 8, "chain": 9}
_CODEC_NAMES = {v: k for k, v in CODECS.items()}
DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}
_DTYPE_OF = {v: k for k, v in DTYPES.items()}

_DECODERS: dict[str, Callable] = {}


def register_decoder(codec: str, fn: Callable) -> None:
    """Register `fn(packet, out=None) -> Tensor` as the decoder of a codec."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}")
    _DECODERS[codec] = fn


def decode(packet: "Packet", out: torch.Tensor | None = None) -> torch.Tensor:
    """Turn any packet back into a tensor; the packet alone says how."""
    if packet.codec not in _DECODERS:
        import milktea.compressors  # noqa: F401  (registers the decoders)
    return _DECODERS[packet.codec](packet, out=out)


def varint_size(v: int) -> int:
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def _put_varint(buf: bytearray, v: int) -> None:
    if v < 0:
        raise ValueError(f"varints are non-negative, got {v}")
    while v >= 0x80:
        buf.append((v & 0x7F) | 0x80)
        v >>= 7
    buf.append(v)


def _get_varint(b: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(b):
            raise ValueError("truncated packet: a varint runs past the end of the header")
        byte = b[pos]
        pos += 1
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed packet: varint longer than 9 bytes")


@dataclass(frozen=True, eq=False)
class Packet:
    """What crosses the wire for one tensor.

    >>> from milktea import TopK
    >>> p = TopK(k=2).compress(torch.tensor([0.1, -3.0, 0.2, 5.0]))
    >>> p.nbytes == len(p.to_bytes())
    True
    >>> Packet.from_bytes(p.to_bytes()) == p
    True
    """
    codec: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    params: tuple[int, ...] = ()
    parts: tuple[torch.Tensor, ...] = ()

    def __post_init__(self):
        if self.codec not in CODECS:
            raise ValueError(f"unknown codec {self.codec!r}; known: {sorted(CODECS)}")
        if self.dtype not in DTYPES:
            raise TypeError(f"packets carry float tensors, got dtype {self.dtype}")
        for p in self.parts:
            if p.dtype != torch.uint8 or p.dim() != 1:
                raise TypeError("packet parts must be 1-D uint8 tensors (raw bytes)")

    # -- sizes ---------------------------------------------------------------
    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def header(self) -> bytes:
        buf = bytearray(MAGIC)
        buf += bytes((VERSION, CODECS[self.codec], DTYPES[self.dtype]))
        for seq in (self.shape, self.params):
            _put_varint(buf, len(seq))
            for v in seq:
                _put_varint(buf, int(v))
        _put_varint(buf, len(self.parts))
        for p in self.parts:
            _put_varint(buf, p.numel())
        return bytes(buf)

    @property
    def header_nbytes(self) -> int:
        n = 5 + varint_size(len(self.shape)) + varint_size(len(self.params))
        n += sum(varint_size(int(d)) for d in self.shape) + sum(varint_size(int(v)) for v in self.params)
        n += varint_size(len(self.parts)) + sum(varint_size(p.numel()) for p in self.parts)
        return n

    @property
    def payload_nbytes(self) -> int:
        return sum(p.numel() for p in self.parts)

    @property
    def nbytes(self) -> int:
        """Exact number of bytes on the wire, header included."""
        return self.header_nbytes + self.payload_nbytes

    @property
    def dense_nbytes(self) -> int:
        """Bytes the uncompressed tensor would take."""
        return self.numel * torch.empty((), dtype=self.dtype).element_size()

    @property
    def ratio(self) -> float:
        """Compression ratio R = original bytes / wire bytes."""
        return self.dense_nbytes / self.nbytes

    @property
    def device(self) -> torch.device:
        return self.parts[0].device if self.parts else torch.device("cpu")

    # -- serialisation -------------------------------------------------------
    def to_tensor(self) -> torch.Tensor:
        """The packet as one uint8 tensor on the packet's device (for collectives)."""
        head = torch.frombuffer(bytearray(self.header()), dtype=torch.uint8).to(self.device)
        return torch.cat([head, *self.parts])

    def to_bytes(self) -> bytes:
        return self.to_tensor().cpu().numpy().tobytes()

    @classmethod
    def from_tensor(cls, data: torch.Tensor) -> "Packet":
        """Parse a packet from a uint8 tensor (trailing padding is ignored)."""
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8:
            raise TypeError("from_tensor needs a uint8 tensor")
        data = data.reshape(-1)
        # The header is small; read at most its largest plausible size from the device.
        head = data[: min(data.numel(), 4096)].cpu().numpy().tobytes()
        codec, shape, dtype, params, lengths, pos = _parse_header(head)
        total = pos + sum(lengths)
        if total > data.numel():
            raise ValueError(f"truncated packet: header announces {total} bytes, got {data.numel()}")
        parts, off = [], pos
        for n in lengths:
            parts.append(data[off: off + n])
            off += n
        return cls(codec, shape, dtype, params, tuple(parts))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, device=None) -> "Packet":
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("empty byte string is not a packet")
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if device is not None:
            t = t.to(device)
        return cls.from_tensor(t)

    # -- conveniences --------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Packet) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        parts = ", ".join(f"{p.numel()} B" for p in self.parts)
        return (f"Packet({self.codec}, shape={self.shape}, {str(self.dtype).replace('torch.', '')}, "
                f"params={self.params}, {self.nbytes} B on the wire = {self.ratio:.1f}x smaller, "
                f"parts=[{parts}])")


def _parse_header(b: bytes):
    if len(b) < 5 or b[:2] != MAGIC:
        raise ValueError("not a milktea packet (bad magic bytes)")
    if b[2] != VERSION:
        raise ValueError(f"packet version {b[2]} is not supported (expected {VERSION})")
    if b[3] not in _CODEC_NAMES or b[4] not in _DTYPE_OF:
        raise ValueError(f"malformed packet: unknown codec id {b[3]} or dtype id {b[4]}")
    pos = 5
    seqs = []
    for _ in range(3):
        n, pos = _get_varint(b, pos)
        if n > 64:
            raise ValueError(f"malformed packet: {n} header fields is implausible")
        vals = []
        for _ in range(n):
            v, pos = _get_varint(b, pos)
            vals.append(v)
        seqs.append(tuple(vals))
    shape, params, lengths = seqs
    return _CODEC_NAMES[b[3]], shape, _DTYPE_OF[b[4]], params, lengths, pos


def concat_packets(packets: Sequence[Packet]) -> torch.Tensor:
    """All packets back to back as one uint8 tensor."""
    return torch.cat([p.to_tensor() for p in packets])
