"""The compressor contract and the byte helpers every codec shares."""
from __future__ import annotations

import copy
from typing import Sequence

import torch

from ..checks import check_choice, check_grad, NONFINITE_POLICIES
from ..packet import Packet, decode


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


def output(packet: Packet, out: torch.Tensor | None) -> torch.Tensor:
    """The tensor a decoder writes into: `out` if given (checked), else a new one."""
    if out is None:
        return torch.empty(packet.shape, dtype=packet.dtype, device=packet.device)
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


class Compressor:
    """Base class: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``.

    Subclasses set ``codec`` and implement ``_compress(tensor)``; decoding is a
    function of the packet alone (see :func:`milktea.packet.decode`).
    """
    codec = "dense"
    protocol = "allgather"   # how packets cross the wire: see milktea.distributed.protocols
    #: True for compressors whose packets have a fixed support, so a collective can sum
    #: them directly (all-reduce) instead of gathering every worker's packet.
    summable = False
    #: True for compressors that drop information systematically (biased): they need
    #: error feedback to converge.
    biased = False

    def __init__(self, nonfinite: str = "raise"):
        self.nonfinite = check_choice(nonfinite, NONFINITE_POLICIES, "nonfinite")

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    def compress(self, tensor: torch.Tensor) -> Packet:
        tensor = check_grad(tensor, "gradient", self.nonfinite)
        with torch.no_grad():
            return self._compress(tensor.detach())

    def _compress(self, tensor: torch.Tensor) -> Packet:  # pragma: no cover - abstract
        raise NotImplementedError

    def decompress(self, packet: Packet, out: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(packet, Packet):
            raise TypeError(f"decompress needs a Packet, got {type(packet).__name__}")
        return decode(packet, out=out)

    def aggregate(self, packets: Sequence[Packet]) -> torch.Tensor:
        """Sum of the decompressed packets: what a collective delivers to each worker."""
        if len(packets) == 0:
            raise ValueError("aggregate needs at least one packet")
        total = self.decompress(packets[0]).clone()
        for p in packets[1:]:
            if p.shape != packets[0].shape:
                raise ValueError(f"packets disagree on shape: {p.shape} vs {packets[0].shape}")
            total += self.decompress(p)
        return total

    def fork(self, rank: int = 0, stream: int = 0) -> "Compressor":
        """A copy for one worker's tensor stream: no state is shared with the original.

        Stochastic compressors get a random stream of their own per (rank, stream), so
        that workers' rounding errors average out instead of adding up. Compressors whose
        workers must agree (RandomK's positions, PowerSGD's start) keep their seed.
        """
        twin = copy.deepcopy(self)
        twin._reseed(rank, stream)
        return twin

    def _reseed(self, rank: int, stream: int) -> None:
        gen = getattr(self, "_gen", None)
        if gen is not None and getattr(self, "stochastic", False):
            gen.manual_seed((self.seed * 1_000_003 + rank * 7919 + stream) % (1 << 62))

    def subtract_sent(self, residual: torch.Tensor, packet: Packet) -> None:
        """residual -= decompress(packet), in place (error feedback's bookkeeping)."""
        residual -= self.decompress(packet).to(residual.dtype)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_args().items())
        return f"{type(self).__name__}({args})"

    def _repr_args(self) -> dict:
        return {}


class Identity(Compressor):
    """No compression: the raw tensor bytes (the dense baseline).

    >>> Identity().compress(torch.ones(10)).ratio < 1.0   # a small header costs a few bytes
    True
    """
    codec = "dense"
    protocol = "allreduce"
    summable = True

    @property
    def name(self) -> str:
        return "dense"

    def _compress(self, t):
        return Packet("dense", tuple(t.shape), t.dtype, (), (to_bytes(t).clone(),))


def _decode_dense(packet: Packet, out=None):
    res = output(packet, out)
    res.view(-1).copy_(from_bytes(packet.parts[0], packet.dtype))
    return res
