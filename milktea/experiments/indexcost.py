"""What a sparse packet's positions cost: every index encoding's exact bytes per kept
entry, block-sparse selection, and how often 1-byte gaps need escapes.

    >>> import torch
    >>> e = escapes(torch.arange(1000.0), 0.003)       # the 3 largest sit side by side
    >>> e["k"], e["largest gap"]
    (3, 997)
"""
from __future__ import annotations

import math

import torch

from .. import index as index_codec
from ..checks import check_grad, check_positive_int, check_ratio
from ..compressors import TopK


def block_topk(x: torch.Tensor, ratio: float, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-sparse selection: keep the ceil(ratio n / block) blocks of `block` consecutive
    entries with the largest norms. Returns (sorted block ids, the flat indices they cover)."""
    x = check_grad(x, "x").reshape(-1)
    check_ratio(ratio), check_positive_int(block, "block")
    n = x.numel()
    nblocks = (n + block - 1) // block
    pad = torch.nn.functional.pad(x.float(), (0, nblocks * block - n))
    norms = pad.view(nblocks, block).pow(2).sum(1)
    keep = max(1, min(nblocks, math.ceil(ratio * n / block)))
    ids = norms.topk(keep).indices.sort().values
    flat = (ids[:, None] * block + torch.arange(block)).reshape(-1)
    return ids, flat[flat < n]


def index_costs(x: torch.Tensor, ratios=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3), block: int = 32) -> list[dict]:
    """Index bytes per kept entry for Top-K's positions in each encoding (exact sizes from
    milktea.index), and for block-sparse selection (block ids, delta-encoded), with the share
    of the gradient's squared norm each selection keeps."""
    x = check_grad(x, "x").reshape(-1).float()
    n, norm2 = x.numel(), float(x.pow(2).sum())
    rows = []
    for r in ratios:
        idx = TopK(r).select(x)[0]
        k = idx.numel()
        s = index_codec.sizes(idx, n)
        ids, flat = block_topk(x, r, block)
        _nbytes, enc = index_codec.encode(ids, (n + block - 1) // block)
        row = {"ratio": r, "k": k, **{f"{e} B/entry": s[e] / k for e in index_codec.ENCODINGS},
               f"block{block} B/entry": enc.numel() / flat.numel(),
               "top-k norm kept": float(x[idx].pow(2).sum()) / norm2,
               f"block{block} norm kept": float(x[flat].pow(2).sum()) / norm2,
               "block values": flat.numel()}
        rows.append(row)
    return rows


def escapes(x: torch.Tensor, ratio: float) -> dict:
    """How often a 1-byte gap is not enough: Top-K positions of `x`, gaps >= 255 need escapes."""
    x = check_grad(x, "x").reshape(-1)
    idx = TopK(ratio).select(x.float())[0]
    gaps = torch.diff(idx, prepend=torch.tensor([-1])) - 1
    return {"k": idx.numel(), "numel": x.numel(), "largest gap": int(gaps.max()),
            "gaps >= 255": int((gaps >= 255).sum()), "escape bytes": int((gaps // 255).sum()),
            "delta8 bytes": index_codec.sizes(idx, x.numel())["delta8"]}


def index_sentence(costs: list[dict], esc: dict) -> str:
    """What the index table says, from its numbers: bytes per index at 1% in each gap
    encoding against int32's 4, delta8 at 0.1% (escapes included) against int32, and what
    blocks of 32 keep against Top-K."""
    from ..i18n import _
    from . import verdicts
    r1 = min(costs, key=lambda r: abs(r["ratio"] - 0.01))
    sparse = min(costs, key=lambda r: abs(r["ratio"] - 0.001))
    best = min(r1["delta8 B/entry"], r1["varint B/entry"])
    text = _("At 1% the 1-byte gaps cost **{d8:.2f} bytes per index** and varints {vi:.2f}, against int32's 4: with "
             "4-byte values a kept entry costs {total:.2f} bytes instead of 8.").format(
        d8=r1["delta8 B/entry"], vi=r1["varint B/entry"], total=4 + best)
    d = sparse["delta8 B/entry"]
    said = (_("more than int32's 4") if d > 4 else _("still less than int32's 4") if d < 4 else _("as much as int32's 4"))
    text += " " + _("At 0.1% the gaps are long ({long} of {k} exceed 255, the largest is {big:,}), and with their escapes "
                    "delta8 costs {d:.1f} bytes per index: {said}. That is why the library sizes every encoding exactly "
                    "and sends the smallest.").format(long=esc["gaps >= 255"], k=esc["k"], big=esc["largest gap"], d=d,
                                                       said=said)
    blocks, top = r1["block32 norm kept"], r1["top-k norm kept"]
    text += " " + _("Blocks of 32 cost {b:.2f} bytes of index per value; at 1% they keep {kb:.0%} of the squared norm, "
                    "Top-K {kt:.0%}.").format(b=r1["block32 B/entry"], kb=blocks, kt=top)
    return verdicts.tidy(text)
