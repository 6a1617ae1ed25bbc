"""Packet: exactly what one worker puts on the wire for one tensor.

Layout (all integers are LEB128 varints unless noted)::

    b"MT"  version:u8  codec:u8  dtype:u8
    ndim  dims...  nparams  params...  nparts  part_lengths...
    part bytes, one after another

`packet.nbytes` is the length of that byte string, header included, computed
without building it; tests check it equals ``len(packet.to_bytes())``.

This module knows the wire format only. What the bytes of a codec mean is told by
the module that defines the codec, through :func:`register_codec` (a compressor in
your own file can register one too). Bytes from the wire are hostile: every
decoder checks every size and parameter against the bytes present before it
allocates anything, and a header may not declare more elements than its payload
can stand for (:meth:`Packet.check_size`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

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
class Codec:
    """How one codec's packets are read: its wire id, decoder and size rule.

    decode(packet, out=None) -> tensor, with `out` (when given) checked by the caller.
    expansion: the most elements one payload byte may stand for (8 for one bit per
        element; SPARSE_EXPANSION for index/value packets); headers that declare more
        are refused before anything is allocated.
    add(packet, out, alpha): optional fused ``out += alpha * decode(packet)`` that
        needs no full-size temporary (see :func:`decode_add`).
    sparse(packet) -> (indices, values): optional, for codecs whose packets touch only
        the flat positions they list (every size checked); :func:`decode_mean` then
        divides only those entries, not the whole tensor.
    add_divide(packet, out, count) -> bool: optional ``out = (out + decode(packet)) /
        count`` in one pass, for a mean's last packet, with the bits of the add then the
        division; False where it cannot (the caller adds, then divides).
    """
    name: str
    id: int
    decode: Callable
    expansion: float
    add: Callable | None = None
    sparse: Callable | None = None
    add_divide: Callable | None = None

    def __repr__(self) -> str:
        return f"Codec({self.name!r}, id={self.id}, expansion={self.expansion:g})"


_BY_NAME: dict[str, Codec] = {}
_BY_ID: dict[int, Codec] = {}
#: name -> wire id of every registered codec (read only; use register_codec).
CODECS: dict[str, int] = {}


def register_codec(name: str, id: int, decode: Callable, *, expansion: float,
                   add: Callable | None = None, sparse: Callable | None = None,
                   add_divide: Callable | None = None) -> Codec:
    """Make `name` a codec: packets with wire id `id` are read by `decode`.

    Library codecs use ids below 64; pick one from 64 to 255 for your own. Registering
    the same name with the same id again replaces the functions (module reloads);
    a name or id already taken by another codec is refused.

    >>> register_codec("dense", 0, lambda p, out=None: None, expansion=1.0)   # doctest: +SKIP
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a codec name is a non-empty str, got {name!r}")
    if isinstance(id, bool) or not isinstance(id, int) or not 0 <= id <= 255:
        raise ValueError(f"a codec id is an int in [0, 255] (one header byte), got {id!r}")
    if not callable(decode) or any(f is not None and not callable(f) for f in (add, sparse, add_divide)):
        raise TypeError("decode (and add, sparse and add_divide, if given) must be callables")
    if not (isinstance(expansion, (int, float)) and 0 < expansion <= SPARSE_EXPANSION):
        raise ValueError(f"expansion must be in (0, {SPARSE_EXPANSION}] elements per payload byte, "
                         f"got {expansion!r}")
    old = _BY_NAME.get(name)
    if old is not None and old.id != id:
        raise ValueError(f"codec {name!r} already has id {old.id}; it cannot also have id {id}")
    taken = _BY_ID.get(id)
    if taken is not None and taken.name != name:
        raise ValueError(f"codec id {id} is taken by {taken.name!r}; free ids: "
                         f"{[i for i in range(64, 256) if i not in _BY_ID][:8]}...")
    codec = Codec(name, id, decode, float(expansion), add, sparse, add_divide)
    _BY_NAME[name] = _BY_ID[id] = codec
    CODECS[name] = id
    return codec


def _load_library_codecs() -> None:
    # The library's compressor modules register their codecs when imported. `import milktea`
    # is lazy, so a process that only reads packets may not have imported them yet: do it on
    # the first lookup that misses (a call-time import: packet.py itself depends on nothing).
    import milktea.compressors  # noqa: F401


def get_codec(name: str) -> Codec:
    """The registered codec called `name` (ValueError naming the known ones otherwise)."""
    codec = _BY_NAME.get(name)
    if codec is None:
        _load_library_codecs()
        codec = _BY_NAME.get(name)
    if codec is None:
        raise ValueError(f"unknown codec {name!r}; known: {sorted(_BY_NAME)} "
                         f"(a compressor module registers its codec with register_codec)")
    return codec


def decode(packet: "Packet", out: torch.Tensor | None = None) -> torch.Tensor:
    """Turn any packet back into a tensor; the packet alone says how."""
    if not isinstance(packet, Packet):
        raise TypeError(f"decode needs a Packet, got {type(packet).__name__}")
    packet.check_size()
    if out is not None:
        _check_out(packet, out, same_dtype=True)
    return get_codec(packet.codec).decode(packet, out=out)


def decode_add(packet: "Packet", out: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
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


def decode_mean(packets: "Sequence[Packet]", out: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
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
    from milktea import kernels     # a call-time import: this module depends on nothing
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


def _check_out(packet: "Packet", out, same_dtype: bool) -> None:
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
        raise ValueError(f"out is on {out.device}, the packet on {packet.device}")


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
        get_codec(self.codec)
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
        cap = get_codec(self.codec).expansion * self.payload_nbytes
        if n > cap:
            raise ValueError(f"malformed packet: a {self.codec} packet of {self.payload_nbytes} payload "
                             f"bytes cannot stand for {n} elements (at most {int(cap)})")

    def header(self) -> bytes:
        buf = bytearray(MAGIC)
        buf += bytes((VERSION, get_codec(self.codec).id, DTYPES[self.dtype]))
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
        """Parse a packet from a uint8 tensor (trailing padding is ignored).

        The parts are views of `data`; the header's sizes are checked against the
        bytes present (and :meth:`check_size`) before anything else happens.
        """
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
            t = t.to(device)
        return cls.from_tensor(t)

    # -- conveniences --------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Packet) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        parts = ", ".join(f"{p.numel()} B" for p in self.parts)
        ratio = f"{self.ratio:.1f}x smaller" if self.nbytes else "empty"
        return (f"Packet({self.codec}, shape={self.shape}, {str(self.dtype).replace('torch.', '')}, "
                f"params={self.params}, {self.nbytes} B on the wire = {ratio}, parts=[{parts}])")


def _parse_header(b: bytes):
    if len(b) < 5 or b[:2] != MAGIC:
        raise ValueError("not a milktea packet (bad magic bytes)")
    if b[2] != VERSION:
        raise ValueError(f"packet version {b[2]} is not supported (expected {VERSION})")
    if b[3] not in _BY_ID:
        _load_library_codecs()
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
