"""Packet: exactly what one worker puts on the wire for one tensor.

Layout (all integers are LEB128 varints unless noted)::

    b"MT"  version:u8  codec:u8  dtype:u8
    ndim  dims...  nparams  params...  nparts  part_lengths...
    part bytes, one after another

This module is the wire format and nothing else: a packet's header is written once, when
the packet is made, and read once, when it arrives; `packet.nbytes` (header included) is
known from then on. Which header byte stands for which codec is the codec records'
business (`milktea.compressors.codec`), what a codec's bytes mean its decoder's. Bytes
from the wire are hostile: a header may not declare more elements than its payload can
stand for (:meth:`Packet.check_size`), and every decoder checks every size and parameter
against the bytes present before it allocates anything.
"""
from __future__ import annotations

from dataclasses import dataclass
import torch

from .codec import _BY_ID, _BY_NAME, by_id, lookup

MAGIC = b"MT"
VERSION = 1

#: No packet declares more elements than this, whatever its payload (2**31: 8 GB of float32).
MAX_NUMEL = 1 << 31
#: every integer of a header (dims, params, part lengths) fits a signed 64-bit integer
MAX_FIELD = (1 << 63) - 1
#: a header with more dims, params or parts than this is malformed
MAX_FIELDS = 64

DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}
_DTYPE_OF = {v: k for k, v in DTYPES.items()}
_ITEMSIZE = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8}


def varint_size(v: int) -> int:
    """Bytes of v as a LEB128 varint."""
    return max(1, -(-v.bit_length() // 7))


def _header(codec_id: int, dtype: torch.dtype, shape, params, parts) -> bytes:
    """The header's bytes (see the module's docstring)."""
    buf = bytearray(MAGIC)
    buf += bytes((VERSION, codec_id, DTYPES[dtype]))
    lengths = []
    for p in parts:
        lengths.append(p.numel())
    for seq in (shape, params, lengths):
        for v in (len(seq), *seq):
            v = int(v)
            if not 0 <= v <= MAX_FIELD:
                raise ValueError(f"a packet's header integers (shape, params, part lengths) are in "
                                 f"[0, 2**63), got {v}")
            while v >= 0x80:
                buf.append((v & 0x7F) | 0x80)
                v >>= 7
            buf.append(v)
    return bytes(buf)


def parse_header(b, pos: int = 0):
    """(codec record, shape, dtype, params, part lengths, end) of the header that starts at
    `pos` of `b` (bytes, a memoryview or a 1-D uint8 numpy array); ValueError for anything
    malformed or truncated."""
    n = len(b)
    if n - pos < 5 or b[pos] != 77 or b[pos + 1] != 84:           # b"MT"
        raise ValueError("not a milktea packet (bad magic bytes)")
    if b[pos + 2] != VERSION:
        raise ValueError(f"packet version {b[pos + 2]} is not supported (expected {VERSION})")
    codec = _BY_ID.get(int(b[pos + 3])) or by_id(int(b[pos + 3]))
    dtype = _DTYPE_OF.get(int(b[pos + 4]))
    if dtype is None:
        raise ValueError(f"malformed packet: unknown dtype id {b[pos + 4]}")
    pos += 5
    seqs = []
    for _ in range(3):
        vals, count = [], -1
        while len(vals) != count:
            v = shift = 0
            while True:
                if pos >= n:
                    raise ValueError("truncated packet: a varint runs past the end of the header")
                byte = int(b[pos])
                pos += 1
                v |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= 63:        # 9 bytes carry 63 bits: what torch and the compiled loops take
                    raise ValueError("malformed packet: a header integer longer than 9 bytes (at most 2**63 - 1)")
            if count < 0:
                if v > MAX_FIELDS:
                    raise ValueError(f"malformed packet: {v} header fields is implausible")
                count = v
            else:
                vals.append(v)
        seqs.append(tuple(vals))
    shape, params, lengths = seqs
    return codec, shape, dtype, params, lengths, pos


_CPU = torch.device("cpu")


def _settle(packet, record, head: bytes, payload: int, shape=None):
    """Give `packet` its header bytes, `nbytes`, `numel` and `device`, after refusing one
    whose header declares more elements than its bytes allow: the codec's `expansion`
    (elements per payload byte) times the payload, and MAX_NUMEL in any case (decoders
    then check every size exactly)."""
    shape = packet.shape if shape is None else shape
    n = 1
    for d in shape:
        n *= d
    if n < 1:
        raise ValueError(f"malformed packet: shape {shape} has no elements")
    if n > MAX_NUMEL:
        raise ValueError(f"malformed packet: {n} elements is more than the {MAX_NUMEL} a packet may carry")
    cap = record.expansion * payload
    if n > cap:
        raise ValueError(f"malformed packet: a {record.name} packet of {payload} payload "
                         f"bytes cannot stand for {n} elements (at most {int(cap)})")
    set_ = object.__setattr__
    set_(packet, "_head", head)
    set_(packet, "nbytes", len(head) + payload)
    set_(packet, "numel", n)
    set_(packet, "device", packet.parts[0].device if packet.parts else _CPU)
    return packet


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
        record = _BY_NAME.get(self.codec) or lookup(self.codec)
        if self.dtype not in DTYPES:
            raise TypeError(f"packets carry float tensors, got dtype {self.dtype}")
        payload = 0
        for p in self.parts:
            if not isinstance(p, torch.Tensor) or p.dtype != torch.uint8 or p.dim() != 1:
                raise TypeError("packet parts must be 1-D uint8 tensors (raw bytes)")
            payload += p.numel()
        _settle(self, record, _header(record.id, self.dtype, self.shape, self.params, self.parts), payload)

    # -- sizes ---------------------------------------------------------------
    #: numel: the elements its header declares; nbytes: its length on the wire, header
    #: included; device: where its parts are (both set when it is made or read)

    def check_size(self) -> None:
        """Refuse a packet whose header declares more elements than its bytes allow (every
        packet is checked once, when it is made or read: see `_settle`)."""
        _settle(self, lookup(self.codec), self._head, self.nbytes - len(self._head))

    def header(self) -> bytes:
        """The header's bytes (written once, when the packet was made or read)."""
        return self._head

    @property
    def header_nbytes(self) -> int:
        return len(self._head)

    @property
    def payload_nbytes(self) -> int:
        return self.nbytes - len(self._head)

    @property
    def dense_nbytes(self) -> int:
        """Bytes the uncompressed tensor would take."""
        return self.numel * _ITEMSIZE[self.dtype]

    @property
    def ratio(self) -> float:
        """Compression ratio R = original bytes / wire bytes."""
        return self.dense_nbytes / self.nbytes

    # -- serialisation -------------------------------------------------------
    def to_tensor(self) -> torch.Tensor:
        """The packet as one uint8 tensor on the packet's device (for collectives)."""
        head = torch.frombuffer(bytearray(self._head), dtype=torch.uint8).to(self.device)
        return torch.cat([head, *self.parts])

    def to_bytes(self) -> bytes:
        return self.to_tensor().cpu().numpy().tobytes()

    @classmethod
    def from_tensor(cls, data: torch.Tensor) -> "Packet":
        """Parse a packet from a uint8 tensor (trailing padding is ignored).

        The parts are views of `data`; the header's sizes are checked against the bytes
        present (and :meth:`check_size`) before anything else happens. A tensor off the
        CPU has its header copied to the host first (at most 4 KiB; the DDP hook, which
        reads many packets, has all their headers on the host already: see `read`).
        """
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8:
            raise TypeError("from_tensor needs a uint8 tensor")
        if data.is_meta:
            raise ValueError("from_tensor got a meta tensor (no bytes in it); give the received bytes")
        data = data.reshape(-1)
        head = data.numpy() if data.device.type == "cpu" else data[: min(data.numel(), 4096)].cpu().numpy()
        return read(head, 0, data, None)[0]

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, device=None) -> "Packet":
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"from_bytes needs bytes, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("empty byte string is not a packet")
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if device is not None:
            from ..device import pick_device
            t = t.to(pick_device(device, name="device"))
        return cls.from_tensor(t)

    # -- conveniences --------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Packet) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        from .. import i18n
        parts = ", ".join(f"{p.numel()} B" for p in self.parts)
        sep = i18n._(", ")  # the words about the wire are prose: Chinese commas around them
        wire = (i18n._("{nbytes} B on the wire = {ratio:.1f}x smaller") if self.nbytes else i18n._("empty")).format(
            nbytes=self.nbytes, ratio=self.ratio if self.nbytes else 0.0)
        return (f"Packet({self.codec}, shape={self.shape}, {str(self.dtype).replace('torch.', '')}, "
                f"params={self.params}{sep}{wire}{sep}parts=[{parts}])")


def read(head, pos: int, data: torch.Tensor, off: int | None) -> tuple[Packet, int, int]:
    """The packet whose header starts at head[pos] (bytes, a memoryview or a uint8 numpy array
    on the host) and whose parts start at data[off] (a 1-D uint8 tensor; off None: right
    after the header, in the same bytes), its parts views of `data`; and where the next
    header and the next parts start. The header is parsed once and checked against the
    bytes present. The DDP hook keeps a rank's headers together on the host, its parts on
    the device: no host copy per packet."""
    record, shape, dtype, params, lengths, end = parse_header(head, pos)
    if off is None:
        off = end
    start = off
    for n in lengths:
        off += n
    if off > data.numel():
        raise ValueError(f"truncated packet: header announces {off} bytes, got {data.numel()}")
    parts, at = [], start
    for n in lengths:
        parts.append(data[at: at + n])
        at += n
    n = 1
    for d in shape:
        n *= d
    if not 1 <= n <= MAX_NUMEL or n > record.expansion * (off - start):
        _settle(Packet.__new__(Packet), record, b"", off - start, shape)      # says what is wrong
    packet = object.__new__(Packet)
    head = bytes(head[pos:end])
    set_ = object.__setattr__
    for name, value in (("codec", record.name), ("shape", shape), ("dtype", dtype), ("params", params),
                        ("parts", tuple(parts)), ("_head", head), ("nbytes", len(head) + off - start),
                        ("numel", n), ("device", data.device)):
        set_(packet, name, value)
    return packet, end, off


def lay_out(packets) -> tuple[torch.Tensor, int]:
    """Packets as one byte string laid out as the DDP hook sends them: every packet's parts,
    then every packet's header; and the headers' length (what a receiver copies to the host
    to read them all: `read_laid`).

    >>> from milktea import Sign
    >>> data, tail = lay_out([Sign().compress(torch.ones(8)), Sign().compress(-torch.ones(16))])
    >>> [p.numel for p in read_laid(data, data[data.numel() - tail:].numpy(), 2)]
    [8, 16]
    """
    device = packets[0].device
    parts = [q for p in packets for q in p.parts]
    head = b"".join(p.header() for p in packets)
    parts.append(torch.frombuffer(bytearray(head), dtype=torch.uint8).to(device))
    return torch.cat(parts), len(head)


def read_laid(data: torch.Tensor, head, count: int) -> list[Packet]:
    """The `count` packets of a byte string `lay_out` made (`head`: its last bytes, the
    headers, on the host), each header parsed once, the parts views of `data`."""
    body = data[: data.numel() - len(head)]
    out, at, off = [], 0, 0
    for _ in range(count):
        packet, at, off = read(head, at, body, off)
        out.append(packet)
    return out
