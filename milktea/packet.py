"""Packet: exactly what one worker puts on the wire for one tensor.

Layout (all integers are LEB128 varints unless noted)::

    b"MT"  version:u8  codec:u8  dtype:u8
    ndim  dims...  nparams  params...  nparts  part_lengths...
    part bytes, one after another

`packet.nbytes` is the length of that byte string, header included, computed
without building it; tests check it equals ``len(packet.to_bytes())``.

This module is the wire format and nothing else: the header, and which header byte
stands for which codec (the library's codecs have fixed ids below 64, `LIBRARY_CODECS`;
a codec of your own claims one from 64 to 255). What a codec's bytes mean is told by
the module that defines it, through :func:`milktea.compressors.register_codec`. Bytes
from the wire are hostile: a header may not declare more elements than its payload can
stand for (:meth:`Packet.check_size`), and every decoder checks every size and parameter
against the bytes present before it allocates anything.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
import torch

MAGIC = b"MT"
VERSION = 1

#: No packet declares more elements than this, whatever its payload (2**31: 8 GB of float32).
MAX_NUMEL = 1 << 31
#: Elements a sparse payload byte may stand for: a sparse packet keeps at least one entry
#: in 2**18 (with 4-byte values), so a 20-byte header cannot make a receiver allocate gigabytes.
SPARSE_EXPANSION = 1 << 20

DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}
_DTYPE_OF = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class CodecId:
    """A codec's place in the wire format: its `name`, the header byte `id` that says it,
    and `expansion`, the most elements one payload byte may stand for (8 for one bit per
    element; SPARSE_EXPANSION for index/value packets): a header that declares more is
    refused before anything is allocated (:meth:`Packet.check_size`)."""
    name: str
    id: int
    expansion: float

    def __repr__(self) -> str:
        return f"CodecId({self.name!r}, id={self.id}, expansion={self.expansion:g})"


#: Header bytes below this belong to the library's codecs; a codec of your own takes one
#: from FIRST_USER_ID to 255 (see milktea.compressors.register_codec).
FIRST_USER_ID = 64

#: The library's codecs: their header bytes and size bounds, fixed by the format itself,
#: so that reading a packet never depends on which modules happen to be imported.
LIBRARY_CODECS: dict[str, CodecId] = {c.name: c for c in (
    CodecId("dense", 0, 1.0),                    # every value in the tensor's dtype
    CodecId("topk", 1, SPARSE_EXPANSION),        # indices + values
    CodecId("randomk", 2, SPARSE_EXPANSION),     # a seed + values
    CodecId("quant", 3, 4.0),                    # 2-bit codes at the least
    CodecId("qsgd", 4, 4.0),
    CodecId("terngrad", 5, 4.0),
    CodecId("sign", 6, 8.0),                     # one bit per entry
    CodecId("cast", 7, 0.5),                     # two bytes per entry
    CodecId("powersgd", 8, 1 << 16),             # P and Q of a rank >= 1 factorisation
    CodecId("chain", 9, SPARSE_EXPANSION),       # a sparse packet with its values compressed
)}

_BY_NAME: dict[str, CodecId] = dict(LIBRARY_CODECS)
_BY_ID: dict[int, CodecId] = {c.id: c for c in LIBRARY_CODECS.values()}
#: name -> header byte of every codec the format knows (read only; see claim_id).
CODECS: dict[str, int] = {c.name: c.id for c in LIBRARY_CODECS.values()}


def claim_id(name: str, id: int, expansion: float) -> CodecId:
    """Give a codec of your own (`name`) the header byte `id` (64 to 255) and its size bound.

    Called by :func:`milktea.compressors.register_codec`, which also says how the bytes
    are decoded. Claiming the same name with the same id again replaces the bound (a
    module reloaded); a library name, a library id, or an id or name taken by another
    codec is refused.

    >>> claim_id("mine", 3, expansion=1.0)
    Traceback (most recent call last):
    ...
    ValueError: codec ids 0 to 63 are the library's (3 is 'quant'); give 'mine' an id from 64 to 255, e.g. 64
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a codec name is a non-empty str, got {name!r}")
    if isinstance(id, bool) or not isinstance(id, int) or not 0 <= id <= 255:
        raise ValueError(f"a codec id is an int in [0, 255] (one header byte), got {id!r}")
    if not (isinstance(expansion, (int, float)) and not isinstance(expansion, bool)
            and 0 < expansion <= SPARSE_EXPANSION):
        raise ValueError(f"expansion must be in (0, {SPARSE_EXPANSION}] elements per payload byte, "
                         f"got {expansion!r}")
    free = [i for i in range(FIRST_USER_ID, 256) if i not in _BY_ID]
    if name in LIBRARY_CODECS:
        raise ValueError(f"{name!r} is one of the library's codecs; give yours another name")
    if id < FIRST_USER_ID:
        held = f" ({id} is {_BY_ID[id].name!r})" if id in _BY_ID else ""
        raise ValueError(f"codec ids 0 to {FIRST_USER_ID - 1} are the library's{held}; give {name!r} an id "
                         f"from {FIRST_USER_ID} to 255, e.g. {free[0] if free else 'none is free'}")
    old = _BY_NAME.get(name)
    if old is not None and old.id != id:
        raise ValueError(f"codec {name!r} already has id {old.id}; it cannot also have id {id}")
    taken = _BY_ID.get(id)
    if taken is not None and taken.name != name:
        raise ValueError(f"codec id {id} is taken by {taken.name!r}; free ids: {free[:8]}...")
    codec = CodecId(name, id, float(expansion))
    _BY_NAME[name] = _BY_ID[id] = codec
    CODECS[name] = id
    return codec


def codec_id(name: str) -> CodecId:
    """The wire identity of the codec called `name` (ValueError naming the known ones otherwise).

    >>> codec_id("sign")
    CodecId('sign', id=6, expansion=8)
    """
    codec = _BY_NAME.get(name)
    if codec is None:
        raise ValueError(f"unknown codec {name!r}; known: {sorted(_BY_NAME)} "
                         f"(a codec of your own is registered with milktea.compressors.register_codec)")
    return codec


def varint_size(v: int) -> int:
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


#: every integer of a header (dims, params, part lengths) fits a signed 64-bit integer
MAX_FIELD = (1 << 63) - 1


def _put_varint(buf: bytearray, v: int) -> None:
    if not 0 <= v <= MAX_FIELD:
        raise ValueError(f"a packet's header integers (shape, params, part lengths) are in [0, 2**63), got {v}")
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
        if shift >= 63:        # 9 bytes carry 63 bits: what torch and the compiled loops take (int64)
            raise ValueError("malformed packet: a header integer longer than 9 bytes (at most 2**63 - 1)")


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
        codec_id(self.codec)
        if self.dtype not in DTYPES:
            raise TypeError(f"packets carry float tensors, got dtype {self.dtype}")
        for p in self.parts:
            if not isinstance(p, torch.Tensor) or p.dtype != torch.uint8 or p.dim() != 1:
                raise TypeError("packet parts must be 1-D uint8 tensors (raw bytes)")

    # -- sizes ---------------------------------------------------------------
    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def check_size(self) -> None:
        """Refuse a packet whose header declares more elements than its bytes allow.

        The limit is the codec's `expansion` (elements per payload byte) times the
        payload, and MAX_NUMEL in any case; decoders then check every size exactly.
        """
        n = self.numel
        if n < 1:
            raise ValueError(f"malformed packet: shape {self.shape} has no elements")
        if n > MAX_NUMEL:
            raise ValueError(f"malformed packet: {n} elements is more than the {MAX_NUMEL} a packet may carry")
        cap = codec_id(self.codec).expansion * self.payload_nbytes
        if n > cap:
            raise ValueError(f"malformed packet: a {self.codec} packet of {self.payload_nbytes} payload "
                             f"bytes cannot stand for {n} elements (at most {int(cap)})")

    def header(self) -> bytes:
        buf = bytearray(MAGIC)
        buf += bytes((VERSION, codec_id(self.codec).id, DTYPES[self.dtype]))
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

    def write_into(self, dest: torch.Tensor) -> torch.Tensor:
        """Write the packet's bytes (what `to_tensor` returns) into the uint8 tensor `dest`
        (1-D, contiguous, `nbytes` long) and return it. A part may already lie in the
        same buffer further on (carved there by `milktea.arena`): it is moved down in
        place, with no copy of the whole packet; any part whose bytes a write would
        overrun is set aside first. The packet's parts are not to be read afterwards."""
        if dest.dtype != torch.uint8 or dest.dim() != 1 or dest.numel() != self.nbytes or not dest.is_contiguous():
            raise ValueError(f"write_into needs a contiguous 1-D uint8 tensor of {self.nbytes} bytes, "
                             f"got {dest.dtype} of shape {tuple(dest.shape)}")
        head = self.header()
        start, at, parts = dest.data_ptr(), dest.data_ptr() + len(head), []
        for p in self.parts:
            p = p.reshape(-1)
            src = p.data_ptr() if p.device == dest.device else None
            moved = dest.device.type == "cpu"     # memmove there; elsewhere copy_ refuses any overlap
            if src is not None and src < (at if moved else start + dest.numel()) and src + p.numel() > start \
                    and (src != at or not moved):
                p = p.clone()        # lies where an earlier write lands (or, off the CPU, anywhere in dest)
            parts.append(p)
            at += p.numel()
        dest[: len(head)].copy_(torch.frombuffer(bytearray(head), dtype=torch.uint8))
        off = len(head)
        for p in parts:
            n = p.numel()
            if dest.device.type == "cpu" and p.device.type == "cpu" and p.is_contiguous():
                if p.data_ptr() != start + off:
                    ctypes.memmove(start + off, p.data_ptr(), n)    # overlap-safe, no temporary
            else:
                dest[off: off + n].copy_(p)
            off += n
        return dest

    def to_bytes(self) -> bytes:
        return self.to_tensor().cpu().numpy().tobytes()

    @classmethod
    def from_tensor(cls, data: torch.Tensor) -> "Packet":
        """Parse a packet from a uint8 tensor (trailing padding is ignored).

        The parts are views of `data`; the header's sizes are checked against the
        bytes present (and :meth:`check_size`) before anything else happens.
        """
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8:
            raise TypeError("from_tensor needs a uint8 tensor")
        if data.is_meta:
            raise ValueError("from_tensor got a meta tensor (no bytes in it); give the received bytes")
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
        packet = cls(codec, shape, dtype, params, tuple(parts))
        packet.check_size()
        return packet

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, device=None) -> "Packet":
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("empty byte string is not a packet")
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if device is not None:
            from .device import pick_device
            t = t.to(pick_device(device, name="device"))
        return cls.from_tensor(t)

    # -- conveniences --------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Packet) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        from . import i18n
        parts = ", ".join(f"{p.numel()} B" for p in self.parts)
        sep = i18n._(", ")  # the words about the wire are prose: Chinese commas around them
        wire = (i18n._("{nbytes} B on the wire = {ratio:.1f}x smaller") if self.nbytes else i18n._("empty")).format(
            nbytes=self.nbytes, ratio=self.ratio if self.nbytes else 0.0)
        return (f"Packet({self.codec}, shape={self.shape}, {str(self.dtype).replace('torch.', '')}, "
                f"params={self.params}{sep}{wire}{sep}parts=[{parts}])")


def _parse_header(b: bytes):
    if len(b) < 5 or b[:2] != MAGIC:
        raise ValueError("not a milktea packet (bad magic bytes)")
    if b[2] != VERSION:
        raise ValueError(f"packet version {b[2]} is not supported (expected {VERSION})")
    if b[3] not in _BY_ID:
        raise ValueError(f"malformed packet: unknown codec id {b[3]}; known: "
                         f"{ {c.name: i for i, c in sorted(_BY_ID.items())} }")
    if b[4] not in _DTYPE_OF:
        raise ValueError(f"malformed packet: unknown dtype id {b[4]}")
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
    return _BY_ID[b[3]].name, shape, _DTYPE_OF[b[4]], params, lengths, pos
