"""Index encodings for sparse packets: which positions were kept.

A sparse packet sends k values and must also say *where* they go. Four ways:

=========  ==========================================================  =================
name       bytes                                                       good when
=========  ==========================================================  =================
int32      4 per index                                                 never the best, the baseline
delta8     1 per gap, plus one 0xFF escape byte per 255 of gap         gaps mostly < 255
varint     LEB128 of each gap: 1 byte below 128, 2 below 16384, ...    gaps of any size
bitmap     one bit per element of the tensor                           dense selections (k/n > ~1/8)
=========  ==========================================================  =================

Gaps are ``g_i = idx_i - idx_{i-1} - 1`` with ``idx_{-1} = -1``, so sorted unique
indices always have ``g >= 0``. ``encode(..., "auto")`` sizes all four exactly and
uses the smallest.
"""
from __future__ import annotations

import torch

from . import kernels
from .bits import pack, packed_size, unpack

ENCODINGS = ("int32", "delta8", "varint", "bitmap")
ESCAPE = 255


def _gaps(indices: torch.Tensor) -> torch.Tensor:
    """The gaps of sorted positions (1-D), or of each row of [W, k] positions."""
    prev = torch.empty_like(indices)
    prev[..., 0] = -1
    prev[..., 1:] = indices[..., :-1]
    return indices - prev - 1


_VARINT_LIMITS = [1 << (7 * j) for j in range(1, 5)]


def _varint_lengths(g: torch.Tensor) -> torch.Tensor:
    """LEB128 length of each gap: 1 byte below 2**7, 2 below 2**14, ..."""
    limits = torch.tensor(_VARINT_LIMITS, dtype=g.dtype, device=g.device)
    return torch.bucketize(g, limits, right=True) + 1


def size_table(indices: torch.Tensor, numel: int, g: torch.Tensor | None = None) -> torch.Tensor:
    """Exact byte size of every encoding (columns in ENCODINGS' order) for each row of
    [W, k] sorted unique positions (g: their gaps, if computed already)."""
    W, k = indices.shape
    g = _gaps(indices) if g is None else g
    return torch.stack([torch.full((W,), 4 * k, dtype=torch.int64, device=g.device),
                        k + (g // ESCAPE).sum(1), _varint_lengths(g).sum(1),
                        torch.full((W,), packed_size(numel, 1), dtype=torch.int64, device=g.device)], 1)


def sizes(indices: torch.Tensor, numel: int) -> dict[str, int]:
    """Exact byte size of every encoding for these sorted unique indices."""
    k = indices.numel()
    fast = kernels.index_sizes(indices, numel)          # one compiled pass, for large CPU selections
    if fast is not None:
        delta8, varint = fast
        return {"int32": 4 * k, "delta8": delta8, "varint": varint, "bitmap": (numel + 7) // 8}
    return dict(zip(ENCODINGS, size_table(indices.reshape(1, -1), numel)[0].tolist()))


def encode_rows(indices: torch.Tensor, numel: int, encoding: str = "auto") -> list[tuple[str, torch.Tensor]]:
    """`encode` of each row of [W, k] sorted unique positions (trusted): the sizes of all
    rows in one pass, and the rows that take delta8 (the common case) encoded together.

    >>> encode_rows(torch.tensor([[0, 3], [1, 300]]), numel=1000)
    [('delta8', tensor([0, 2], dtype=torch.uint8)), ('delta8', tensor([  1, 255,  43], dtype=torch.uint8))]
    """
    W, k = indices.shape
    g = _gaps(indices)
    table = size_table(indices, numel, g)
    if encoding == "auto":
        choice = table.argmin(1).tolist()          # the first of equal sizes, as encode() picks
    else:
        choice = [ENCODINGS.index(encoding)] * W
    d8 = [w for w, c in enumerate(choice) if c == 1]
    out = [None] * W
    if d8:            # every delta8 row's bytes, end to end: 255 where a gap carries on, then its rest
        gd = g[d8] if len(d8) < W else g
        n_esc = (gd // ESCAPE).reshape(-1)
        lengths = table[d8, 1].tolist()
        ends = torch.cumsum(n_esc + 1, 0) - 1
        flat = torch.full((sum(lengths),), ESCAPE, dtype=torch.uint8, device=g.device)
        flat[ends] = (gd.reshape(-1) - ESCAPE * n_esc).to(torch.uint8)
        for w, part in zip(d8, torch.split(flat, lengths)):
            out[w] = ("delta8", part)
    for w, c in enumerate(choice):
        if c != 1:
            out[w] = encode(indices[w], numel, ENCODINGS[c], validate=False)
    return out


def check_indices(indices: torch.Tensor, numel: int) -> torch.Tensor:
    if indices.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"indices must be int64 or int32, got {indices.dtype}")
    indices = indices.reshape(-1).long()
    if indices.numel() == 0:
        raise ValueError("no indices to encode: a sparse packet keeps at least one element")
    if numel >= 2**32:
        raise ValueError("tensors with 2**32 or more elements need splitting before encoding")
    if int(indices[0]) < 0 or int(indices[-1]) >= numel:
        raise ValueError(f"indices must lie in [0, {numel})")
    if indices.numel() > 1 and not bool((indices[1:] > indices[:-1]).all()):
        raise ValueError("indices must be sorted and unique (use torch.sort / torch.unique first)")
    return indices


def encode(indices: torch.Tensor, numel: int, encoding: str = "auto",
           validate: bool = True) -> tuple[str, torch.Tensor]:
    """Encode sorted unique indices; returns (encoding name, uint8 bytes).

    >>> encode(torch.tensor([0, 3, 300]), numel=1000)
    ('delta8', tensor([  0,   2, 255,  41], dtype=torch.uint8))
    """
    if validate:
        indices = check_indices(indices, numel)
    s = None
    if encoding == "auto":
        s = sizes(indices, numel)
        encoding = ENCODINGS[0]
        for e in ENCODINGS[1:]:              # the smallest; of equal sizes the first
            if s[e] < s[encoding]:
                encoding = e
    if encoding == "int32":
        return encoding, indices.to(torch.int32).view(torch.uint8)
    if encoding == "bitmap":
        bits = torch.zeros(numel, dtype=torch.uint8, device=indices.device)
        bits[indices] = 1
        return encoding, pack(bits, 1)
    nb = kernels.jit(indices, numel) if encoding == "delta8" and indices.dtype == torch.int64 else None
    if nb is not None:
        out = torch.empty((s or sizes(indices, numel))["delta8"], dtype=torch.uint8)
        nb.delta8_encode(indices.numpy(), out.numpy())
        return encoding, out
    g = _gaps(indices)
    if encoding == "delta8":
        n_esc = g // ESCAPE
        ends = torch.cumsum(n_esc + 1, 0) - 1          # where each gap's final byte goes
        out = torch.full((int(ends[-1]) + 1,), ESCAPE, dtype=torch.uint8, device=g.device)
        out[ends] = (g - ESCAPE * n_esc).to(torch.uint8)
        return encoding, out
    if encoding == "varint":
        nb = _varint_lengths(g)
        start = torch.cumsum(nb, 0) - nb
        out = torch.empty(int((start[-1] + nb[-1])), dtype=torch.uint8, device=g.device)
        for j in range(5):
            m = nb > j
            if not bool(m.any()):
                break
            byte = (g[m] >> (7 * j)) & 0x7F
            byte = byte | ((nb[m] > j + 1).long() << 7)   # continuation bit
            out[start[m] + j] = byte.to(torch.uint8)
        return encoding, out
    raise ValueError(f"encoding must be 'auto' or one of {ENCODINGS}, got {encoding!r}")


def decode(encoding: str, data: torch.Tensor, k: int, numel: int) -> torch.Tensor:
    """Inverse of :func:`encode`: k sorted unique int64 indices in [0, numel).

    `data` is untrusted: a size that does not match, a truncated or overlong varint, a
    gap past the end, or unsorted, duplicate or negative int32 indices raise ValueError.
    """
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise TypeError("index data must be a 1-D uint8 tensor")
    if k < 1 or k > numel:
        raise ValueError(f"cannot decode {k} indices of a {numel}-element tensor (1 <= k <= numel)")
    if encoding == "int32":
        if data.numel() != 4 * k:
            raise ValueError(f"int32 index part has {data.numel()} bytes, expected {4 * k}")
        idx = data.view(torch.int32).long() if data.storage_offset() % 4 == 0 \
            else data.clone().view(torch.int32).long()
        if int(idx[0]) < 0 or (k > 1 and not bool((idx[1:] > idx[:-1]).all())):
            raise ValueError("int32 indices must be non-negative, sorted and unique")
    elif encoding == "bitmap":
        if data.numel() != packed_size(numel, 1):
            raise ValueError(f"bitmap index part has {data.numel()} bytes, expected {packed_size(numel, 1)}")
        idx = unpack(data, 1, numel).nonzero().reshape(-1)
    elif encoding == "delta8":
        if not k <= data.numel() or int(data[-1]) == ESCAPE:
            raise ValueError(f"delta8 index part of {data.numel()} bytes cannot hold the {k} gaps the "
                             f"packet announces (or it ends inside a gap)")
        nb = kernels.jit(data, numel) if data.is_contiguous() else None
        if nb is not None:            # one compiled pass that checks as it goes
            idx = torch.empty(k, dtype=torch.int64)
            if nb.delta8_decode(data.numpy(), k, numel, idx.numpy()) != 0:
                raise ValueError(f"delta8 index part of {data.numel()} bytes does not hold exactly the {k} "
                                 f"gaps the packet announces within {numel} elements")
            return idx
        b = data.long()
        inc = torch.where(b == ESCAPE, b, b + 1)
        idx = (torch.cumsum(inc, 0) - 1)[b != ESCAPE]
    elif encoding == "varint":
        idx = _decode_varint(data, k, numel)
    else:
        raise ValueError(f"unknown index encoding {encoding!r}")
    if idx.numel() != k:
        raise ValueError(f"index part decodes to {idx.numel()} indices, packet announces {k}")
    if int(idx[-1]) >= numel:
        raise ValueError(f"decoded index {int(idx[-1])} is out of range for {numel} elements")
    return idx


def decode_rows(data: list[torch.Tensor], k: int, numel: int) -> torch.Tensor | None:
    """`decode` of several delta8 index parts of k gaps each, as [W, k] positions, in one
    pass for all of them; None where one does not hold exactly k gaps within numel
    entries (the caller decodes them one by one, and `decode` says what is wrong).

    >>> decode_rows([torch.tensor([0, 2], dtype=torch.uint8), torch.tensor([1, 255, 7], dtype=torch.uint8)], 2, 300)
    tensor([[  0,   3],
            [  1, 264]])
    """
    if any(d.dtype != torch.uint8 or d.dim() != 1 or not k <= d.numel() for d in data):
        return None
    b = torch.cat(data).long()
    lengths = torch.tensor([d.numel() for d in data], device=b.device)
    starts = torch.cumsum(lengths, 0) - lengths
    last = b[starts + lengths - 1]
    inc = torch.where(b == ESCAPE, b, b + 1)
    total = torch.cumsum(inc, 0)
    before = (total[starts - 1] * (starts > 0)).repeat_interleave(lengths)   # each part's own running sum
    keep = b != ESCAPE
    part = torch.repeat_interleave(torch.arange(len(data), device=b.device), lengths)
    counts = torch.zeros(len(data), dtype=torch.long, device=b.device).index_add_(0, part, keep.long())
    if bool((last == ESCAPE).any()) or bool((counts != k).any()):
        return None
    idx = (total - before - 1)[keep].view(len(data), k)
    if int(idx[:, -1].max()) >= numel:
        return None
    return idx


def _decode_varint(data: torch.Tensor, k: int, numel: int) -> torch.Tensor:
    if not k <= data.numel() <= 5 * k or int(data[-1]) >= 0x80:
        raise ValueError(f"varint index part of {data.numel()} bytes cannot hold the {k} gaps the packet "
                         f"announces (1 to 5 bytes each, the last without a continuation bit)")
    b = data.long()
    last = b < 0x80
    group = torch.cumsum(last.long(), 0) - last.long()
    ngroups = int(last.sum())
    if ngroups != k:
        raise ValueError(f"index part decodes to {ngroups} indices, packet announces {k}")
    if int(torch.bincount(group, minlength=1).max()) > 5:
        raise ValueError("malformed varint index: a gap longer than 5 bytes")
    start = torch.zeros(ngroups, dtype=torch.long, device=b.device)
    pos = torch.arange(b.numel(), device=b.device)
    first_of_group = torch.ones_like(last)
    first_of_group[1:] = last[:-1]
    start[group[first_of_group]] = pos[first_of_group]
    shift = 7 * (pos - start[group])             # at most 28: every gap fits in 35 bits
    g = torch.zeros_like(start).scatter_add_(0, group, (b & 0x7F) << shift)
    if int(g.max()) >= numel:                    # also keeps the running sum far from overflow
        raise ValueError(f"malformed varint index: a gap of {int(g.max())} in a {numel}-element tensor")
    return torch.cumsum(g + 1, 0) - 1
