"""A codec's record: everything the library knows about one kind of packet, in one place.

A codec is one kind of packet. Its record holds its `name`, the header byte `id` that says
it on the wire, `expansion` (the most elements one payload byte of a valid packet stands
for: a header that declares more is refused before anything is allocated), how its bytes
are read (`decode`, and the optional fused `add`, `sparse` and `add_divide`) and, for the
library's codecs, the compressor class that writes them (`cls`: its `protocol` and
`biased`), what a packet costs (`cost`) and the named configurations the command lines
and `compare` know (`schemes`). The wire table (`lookup`, `by_id`), the schemes, the
advice's menu and the simulator's protocols are read from these records: a library codec
is one file that ends with its record, a codec of your own is one file that calls
`milktea.compressors.register_codec`.

The library's ids are below FIRST_USER_ID and never change (a test holds every one of
them); a codec of your own takes one from FIRST_USER_ID to 255.

    >>> lookup("sign")
    Codec('sign', id=6, expansion=8)
    >>> by_id(1).name
    'topk'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

#: Header bytes below this belong to the library's codecs.
FIRST_USER_ID = 64
#: Elements a sparse payload byte may stand for: a sparse packet keeps at least one entry
#: in 2**18 (with 4-byte values), so a 20-byte header cannot make a receiver allocate gigabytes.
SPARSE_EXPANSION = 1 << 20


@dataclass(frozen=True)
class Codec:
    """One kind of packet (see the module's docstring).

    decode(packet, out=None) -> tensor, `out` (when given) checked by the caller.
    add(packet, out, alpha): ``out += alpha * decode(packet)`` without a full-size temporary.
    sparse(packet) -> (indices, values): for packets that touch only the flat positions they
        list (sorted, unique, every size checked): a mean of them divides only those entries.
    add_divide(packet, out, count) -> bool: ``out = (out + decode(packet)) / count`` in one
        pass (a mean's last packet), with the bits of the add then the division; False
        where it cannot (the caller adds, then divides).
    rows(packets) -> several packets of one tensor decoded at once, with what `sparse` (for
        a sparse codec: ([W, k] indices, [W, k] values)) or `decode` (a [W, n] tensor)
        gives for each; None where they do not fit its one pass (the caller decodes them
        one by one): the simulator's mean of W workers' packets.
    cls: the compressor that writes these packets (None for a codec registered alone).
    cost(compressor, shape, dtype) -> int: bytes of the packet `compressor` sends for a
        tensor of `shape` (exact where only the shape decides; Top-K: its positions evenly
        spread).
    schemes: {scheme name: (label, make(ratio, rank) -> compressor, error feedback)}: the
        configurations `python -m milktea compare --schemes ...` knows by name.
    """
    name: str
    id: int
    expansion: float
    decode: Callable
    add: Callable | None = None
    sparse: Callable | None = None
    add_divide: Callable | None = None
    rows: Callable | None = None
    cls: type | None = None
    cost: Callable | None = None
    schemes: dict = field(default_factory=dict, compare=False)

    @property
    def protocol(self) -> str:
        """How its packets cross the wire (the class's declaration; "allgather" without one)."""
        return getattr(self.cls, "protocol", "allgather")

    @property
    def biased(self) -> bool:
        """Whether its compressor drops information systematically (then it gets error feedback)."""
        return bool(getattr(self.cls, "biased", False))

    def __repr__(self) -> str:
        return f"Codec({self.name!r}, id={self.id}, expansion={self.expansion:g})"


_BY_NAME: dict[str, Codec] = {}
_BY_ID: dict[int, Codec] = {}


def register(codec: Codec, library: bool = False) -> Codec:
    """Put `codec` in the table: a library codec (`library`) has an id below FIRST_USER_ID,
    any other one from FIRST_USER_ID to 255; a name or id held by another codec is refused;
    the same name with the same id again replaces the record (a module reloaded)."""
    name, i, expansion = codec.name, codec.id, codec.expansion
    if not isinstance(name, str) or not name:
        raise TypeError(f"a codec name is a non-empty str, got {name!r}")
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= 255:
        raise ValueError(f"a codec id is an int in [0, 255] (one header byte), got {i!r}")
    if not (isinstance(expansion, (int, float)) and not isinstance(expansion, bool)
            and 0 < expansion <= SPARSE_EXPANSION):
        raise ValueError(f"expansion must be in (0, {SPARSE_EXPANSION}] elements per payload byte, "
                         f"got {expansion!r}")
    if not callable(codec.decode) or any(f is not None and not callable(f)
                                         for f in (codec.add, codec.sparse, codec.add_divide, codec.rows, codec.cost)):
        raise TypeError("decode (and add, sparse, add_divide, rows and cost, if given) must be callables")
    free = [j for j in range(FIRST_USER_ID, 256) if j not in _BY_ID]
    old, taken = _BY_NAME.get(name), _BY_ID.get(i)
    if not library:
        if old is not None and old.id < FIRST_USER_ID:
            raise ValueError(f"{name!r} is one of the library's codecs; give yours another name")
        if i < FIRST_USER_ID:
            held = f" ({i} is {taken.name!r})" if taken is not None else ""
            raise ValueError(f"codec ids 0 to {FIRST_USER_ID - 1} are the library's{held}; give {name!r} an id "
                             f"from {FIRST_USER_ID} to 255, e.g. {free[0] if free else 'none is free'}")
    elif i >= FIRST_USER_ID:
        raise ValueError(f"a library codec's id is below {FIRST_USER_ID}, got {i} for {name!r}")
    if old is not None and old.id != i:
        raise ValueError(f"codec {name!r} already has id {old.id}; it cannot also have id {i}")
    if taken is not None and taken.name != name:
        raise ValueError(f"codec id {i} is taken by {taken.name!r}; free ids: {free[:8]}...")
    _BY_NAME[name] = _BY_ID[i] = codec
    return codec


def lookup(name: str) -> Codec:
    """The codec called `name` (ValueError naming the known ones otherwise)."""
    codec = _BY_NAME.get(name)
    if codec is None:
        raise ValueError(f"unknown codec {name!r}; known: {sorted(_BY_NAME)} "
                         f"(a codec of your own is registered with milktea.compressors.register_codec)")
    return codec


def by_id(i: int) -> Codec:
    """The codec whose header byte is `i` (ValueError naming the known ones otherwise)."""
    codec = _BY_ID.get(i)
    if codec is None:
        raise ValueError(f"malformed packet: unknown codec id {i}; known: "
                         f"{ {c.name: j for j, c in sorted(_BY_ID.items())} }")
    return codec


def library() -> list[Codec]:
    """The library's codecs, in id order."""
    return [c for i, c in sorted(_BY_ID.items()) if i < FIRST_USER_ID]


def codec_ids() -> dict[str, int]:
    """name -> header byte of every codec the table holds."""
    return {c.name: i for i, c in sorted(_BY_ID.items())}
