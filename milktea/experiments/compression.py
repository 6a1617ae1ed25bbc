"""Chapter 02's numbers: what a summary costs on the wire and what it keeps.

    >>> g = torch.randn(10_000)
    >>> m = measure(TopK(ratio=0.01), g)
    >>> m.family, m.ratio > 50, m.energy < 0.1     # 100 of 10,000 kept: R ~ 70, ~5% of the energy
    ('sparsify', True, True)
    >>> lossless(g)["zlib"] < 1.2          # general-purpose compressors barely help
    True
"""
from __future__ import annotations

import bz2
import lzma
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from .. import cost
from ..checks import check_grad
from ..i18n import _
from . import verdicts
from ..compressors import (Cast, Chain, Compressor, Identity, PowerSGD, Quantize, RandomK, Sign,
                           Sparsifier, TopK)
from ..compressors.quantize import QSGD

LOSSLESS = {"zlib": lambda b: zlib.compress(b, 9), "bz2": lambda b: bz2.compress(b, 9),
            "lzma": lambda b: lzma.compress(b, preset=6)}


def lossless(tensor: torch.Tensor, codecs: tuple[str, ...] = ("zlib", "bz2", "lzma")) -> dict[str, float]:
    """Compression ratio (original bytes / compressed bytes) of general-purpose lossless
    compressors on the tensor's raw bytes."""
    t = check_grad(tensor).detach().cpu().contiguous()
    raw = t.numpy().tobytes()
    out = {}
    for c in codecs:
        if c not in LOSSLESS:
            raise ValueError(f"codec must be one of {tuple(LOSSLESS)}, got {c!r}")
        out[c] = len(raw) / len(LOSSLESS[c](raw))
    return out


def family(compressor) -> str:
    """Which family a compressor belongs to: sparsify, quantize, both, low rank or none."""
    if isinstance(compressor, Chain):
        return "both"
    if isinstance(compressor, Sparsifier):
        return "sparsify"
    if isinstance(compressor, (Quantize, QSGD, Sign, Cast)):
        return "quantize"
    if isinstance(compressor, PowerSGD):
        return "low rank"
    return "none"


@dataclass(frozen=True)
class Measurement:
    """One compressor on one tensor: real wire bytes and how much of the tensor survives."""
    name: str
    family: str
    wire_bytes: int       # packet.nbytes: the exact length of what is sent, header included
    dense_bytes: int      # the tensor's own bytes
    rel_error: float      # ||g - C(g)|| / ||g||
    cosine: float         # cos(g, C(g)): does the summary point the same way?
    energy: float         # ||C(g)||^2 / ||g||^2

    @property
    def ratio(self) -> float:
        """R = original bytes / wire bytes."""
        return self.dense_bytes / self.wire_bytes

    @property
    def bits_per_entry(self) -> float:
        return 8 * self.wire_bytes / (self.dense_bytes / 4)

    def as_row(self) -> dict:
        return {"scheme": self.name, "family": self.family, "wire bytes": self.wire_bytes,
                "R": self.ratio, "relative error": self.rel_error, "cosine": self.cosine}


def measure(compressor: Compressor, tensor: torch.Tensor) -> Measurement:
    """Compress `tensor` once with `compressor` and measure the real packet."""
    if not isinstance(compressor, Compressor):
        raise TypeError(f"compressor must be a milktea Compressor (e.g. TopK(ratio=0.01)), "
                        f"got {type(compressor).__name__}")
    g = check_grad(tensor)
    packet = compressor.compress(g)
    back = compressor.decompress(packet).reshape(-1).double()
    x = g.reshape(-1).double()
    norm = float(x.norm())
    if norm == 0:
        raise ValueError("the tensor is all zeros: there is nothing to compare the summary with")
    bnorm = float(back.norm())
    cos = float(x @ back) / (norm * bnorm) if bnorm > 0 else 0.0
    return Measurement(compressor.name, family(compressor), packet.nbytes, g.numel() * g.element_size(),
                       float((x - back).norm()) / norm, cos, (bnorm / norm) ** 2)


def default_schemes() -> list[Compressor]:
    """The schemes chapter 02 compares: both families, and the two stacked."""
    return [Identity(), Cast(torch.float16), Quantize(8), Quantize(4), Quantize(2), Sign(), TopK(0.1), TopK(0.01),
            RandomK(0.01), Chain(TopK(0.01), Quantize(8))]


def scheme_table(tensor: torch.Tensor, schemes: list[Compressor] | None = None) -> list[Measurement]:
    """`measure` for each scheme on the same tensor."""
    return [measure(c, tensor) for c in (schemes or default_schemes())]


def tradeoff(tensor: torch.Tensor, ratios=(0.3, 0.1, 0.03, 0.01, 0.003, 0.001),
             bits=(8, 4, 2)) -> dict[str, list[Measurement]]:
    """R against what is kept, one curve per family: Top-K over `ratios`, Random-K over
    the same, absmax quantization over `bits` (then Sign, 1 bit), Top-K + 8-bit values."""
    return {"Top-K": [measure(TopK(r), tensor) for r in ratios],
            "Random-K": [measure(RandomK(r), tensor) for r in ratios],
            "quantize": [measure(Quantize(b), tensor) for b in bits] + [measure(Sign(), tensor)],
            "Top-K + int8": [measure(Chain(TopK(r), Quantize(8)), tensor) for r in ratios]}


def stacking_sentence(top: Measurement, stacked: Measurement, barely: float = 0.05) -> str:
    """What stacking int8 on Top-K did, from the two measurements: the extra ratio (less than
    int8's own 4x where positions and the header stay) and the error, which "barely moves"
    only when it grew by at most `barely` (relative).

    >>> a = Measurement("top1%", "sparsify", 800, 40_000, 0.6, 0.8, 0.64)
    >>> b = Measurement("top1%+int8", "both", 500, 40_000, 0.6003, 0.8, 0.64)
    >>> stacking_sentence(a, b).endswith("int8's rounding is small next to what Top-K drops.")
    True
    """
    gain = stacked.ratio / top.ratio
    text = _("Stacking takes {top} from R = {r1:.1f} to **{stacked}** at R = {r2:.1f}: {gain:.2f}x more").format(
        top=top.name, r1=top.ratio, stacked=stacked.name, r2=stacked.ratio, gain=gain)
    if gain < 4:
        text += _(", not the 4x that int8 gives on its own, because only the *values* shrink to a quarter: the "
                  "positions and the header stay.")
    else:
        text += "."
    grew = stacked.rel_error - top.rel_error
    if grew <= barely * top.rel_error:
        text += " " + _("The error barely moves ({a:.3f} to {b:.3f}): int8's rounding is small next to what Top-K "
                        "drops.").format(a=top.rel_error, b=stacked.rel_error)
    else:
        text += " " + _("The error grows from {a:.3f} to {b:.3f}: int8's rounding adds to what Top-K drops.").format(
            a=top.rel_error, b=stacked.rel_error)
    return verdicts.tidy(text)


def exchange_times(dense_bytes: float, ratio: float, workers, link: cost.Link) -> dict:
    """Does R times fewer bytes mean R times less waiting? Per worker count: the dense
    gradient all-reduced (a ring sums as it goes), the compressed packets all-gathered
    (sparse or quantized packets can't be summed on the way, so everyone receives every
    packet), and the naive dense time / R."""
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio}")
    ns = np.array([int(n) for n in workers])
    dense = np.array([cost.ring_allreduce_time(dense_bytes, n, link) for n in ns])
    gathered = np.array([cost.allgather_time(dense_bytes / ratio, n, link) for n in ns])
    return {"workers": ns, "dense all-reduce": dense, "compressed all-gather": gathered,
            "dense / R": dense / ratio}


def received(compressor: Compressor, tensor: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Every entry of the tensor and what arrives for it after one compress/decompress."""
    g = check_grad(tensor).reshape(-1)
    back = compressor.decompress(compressor.compress(g)).reshape(-1)
    return g.double().cpu().numpy(), back.double().cpu().numpy()


BITS = (32, 16, 8, 4, 2, 1)


def build_scheme(share: float = 1.0, bits: int = 32, sparsifier: str = "topk") -> Compressor:
    """The scheme that keeps `share` of the entries (Top-K or Random-K) and writes each
    kept value with `bits` bits (32: as is, 16: fp16, 8/4/2: absmax levels, 1: sign and
    one scale): the two families, alone or stacked.

    >>> build_scheme(0.01, 8).name
    'topk-1%+int8'
    """
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")
    if sparsifier not in ("topk", "randomk"):
        raise ValueError(f"sparsifier must be 'topk' or 'randomk', got {sparsifier!r}")
    values = {32: None, 16: Cast(torch.float16), 8: Quantize(8), 4: Quantize(4), 2: Quantize(2), 1: Sign()}[bits]
    if share >= 1.0:
        return values if values is not None else Identity()
    sparse = TopK(share) if sparsifier == "topk" else RandomK(share)
    return sparse if values is None else Chain(sparse, values)
