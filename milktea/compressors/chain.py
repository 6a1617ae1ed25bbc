"""Chain: sparsify, then compress the kept values (e.g. Top-K, then 8-bit values).

The two families stack: Top-K decides *which* entries travel, a quantizer decides
*how many bits* each of them takes. Packet (codec ``chain``): params = (codec id of
the sparse packet, its params...), parts = (its index parts..., the inner packet of
the values, whole, header included).
"""
from __future__ import annotations

from ..packet import CODECS, Packet, decode, register_decoder
from .base import Compressor, to_bytes
from .sparse import Sparsifier, sparse_decode, _decode_sparse
from .sparse import SPARSE_DECODERS

_NAMES = {v: k for k, v in CODECS.items()}


class Chain(Compressor):
    """Sparsify with `first`, then compress the values with `second`.

    >>> import torch
    >>> from milktea import TopK, Quantize
    >>> c = Chain(TopK(ratio=0.1), Quantize(bits=8))
    >>> x = torch.randn(1000)
    >>> c.compress(x).nbytes < TopK(ratio=0.1).compress(x).nbytes
    True
    """
    codec = "chain"
    protocol = "allgather"
    biased = True

    def __init__(self, first: Sparsifier, second: Compressor):
        if not isinstance(first, Sparsifier):
            raise TypeError(f"Chain's first stage must sparsify (TopK, RandomK), got {first!r}")
        if not isinstance(second, Compressor) or isinstance(second, (Sparsifier, Chain)):
            raise TypeError(f"Chain's second stage must compress values (Quantize, Sign, Cast, ...), "
                            f"got {second!r}")
        super().__init__(first.nonfinite)
        self.first, self.second = first, second

    @property
    def name(self) -> str:
        return f"{self.first.name}+{self.second.name}"

    def __repr__(self):
        return f"Chain({self.first!r}, {self.second!r})"

    def _compress(self, t):
        sparse = self.first.compress(t)
        _, vals = sparse_decode(sparse)
        inner = self.second.compress(vals)
        return Packet("chain", tuple(t.shape), t.dtype, (CODECS[sparse.codec], *sparse.params),
                      (*sparse.parts[:-1], inner.to_tensor()))

    def _reseed(self, rank, stream):
        self.first._reseed(rank, stream)
        self.second._reseed(rank, stream)

    aggregate = Sparsifier.aggregate
    subtract_sent = Sparsifier.subtract_sent


def _sparse_of_chain(packet: Packet) -> Packet:
    """The sparse packet a chain packet stands for, with its values decoded."""
    codec = _NAMES[packet.params[0]]
    inner = Packet.from_tensor(packet.parts[-1])
    vals = decode(inner).to(packet.dtype)
    return Packet(codec, packet.shape, packet.dtype, packet.params[1:], (*packet.parts[:-1], to_bytes(vals)))


def _decode_chain(packet, out=None):
    return _decode_sparse(_sparse_of_chain(packet), out)


SPARSE_DECODERS["chain"] = lambda p: sparse_decode(_sparse_of_chain(p))
register_decoder("chain", _decode_chain)
