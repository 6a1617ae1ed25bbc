"""Chain: sparsify, then compress the kept values (e.g. Top-K, then 8-bit values).

The two families stack: Top-K decides *which* entries travel, a quantizer decides
*how many bits* each of them takes. Packet (codec ``chain``): params = (codec id of
the sparse packet, its params...), parts = (its index parts..., the inner packet of
the values, whole, header included).
"""
from __future__ import annotations

import torch

from ..packet import Packet, codec_id
from .base import Compressor
from .registry import decode, register_library_codec
from .wire import to_bytes
from .sparse import SPARSE_DECODERS, Sparsifier, _add_sparse, _decode_sparse, sparse_decode

_SPARSE = ("topk", "randomk")      # what a chain's first stage may be


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
    carries_nonfinite = True    # as far as its second stage does: that stage checks the values
    #: a chain's own step goes through its first stage's: an instance keeps these where its
    #: first stage has them (and Top-K's fused add with them)
    fast_paths = frozenset({"codec_mean", "exact_step", "clears_gradient"})

    def __init__(self, first: Sparsifier, second: Compressor):
        if not isinstance(first, Sparsifier):
            raise TypeError(f"Chain's first stage must sparsify (TopK, RandomK), got {first!r}")
        if not isinstance(second, Compressor) or isinstance(second, (Sparsifier, Chain)):
            raise TypeError(f"Chain's second stage must compress values (Quantize, Sign, Cast, ...), "
                            f"got {second!r}")
        super().__init__(first.nonfinite)
        self.first, self.second = first, second
        through = {"exact_step", "clears_gradient", "fused_add"} & first.fast_paths
        self.fast_paths = type(self).fast_paths - {"exact_step", "clears_gradient"} | (
            through if "exact_step" in type(self).fast_paths else set())

    @property
    def name(self) -> str:
        return f"{self.first.name}+{self.second.name}"

    def __repr__(self):
        return f"Chain({self.first!r}, {self.second!r})"

    def _compress(self, t):
        sparse = self.first.compress(t)
        _, vals = sparse_decode(sparse)
        return self._wrap(t, sparse, self.second.compress(vals))

    @staticmethod
    def _wrap(t, sparse, inner):
        return Packet("chain", tuple(t.shape), t.dtype, (codec_id(sparse.codec).id, *sparse.params),
                      (*sparse.parts[:-1], inner.to_tensor()))

    def compress_with_feedback(self, residual, dtype=None, grad=None, clear_grad=False):
        """Error feedback through the first stage's own step (Top-K adds the gradient and
        selects in one pass), then the values' rounding by the second stage is put back
        in the ledger: the same packet and ledger, bit for bit, as compressing the updated
        ledger and subtracting the decoded packet, with one pass over memory instead of four."""
        if "exact_step" not in self.fast_paths or dtype not in (None, residual.dtype):
            return super().compress_with_feedback(residual, dtype, grad, clear_grad)
        sparse = self.first.compress_with_feedback(residual, grad=grad, clear_grad=clear_grad)
        idx, vals = sparse_decode(sparse)          # the ledger's values, sent exactly, now zeroed
        inner = self.second.compress(vals)
        with torch.no_grad():
            sent = decode(inner).to(sparse.dtype).to(residual.dtype)
            residual.view(-1)[idx] = vals.to(residual.dtype) - sent     # what the rounding left out
        return self._wrap(residual, sparse, inner)

    def state_dict(self):
        return {"first": self.first.state_dict(), "second": self.second.state_dict()}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or set(state) != {"first", "second"}:
            raise ValueError("a Chain's state holds its two stages' states: {'first': ..., 'second': ...}")
        self.first.load_state_dict(state["first"])
        self.second.load_state_dict(state["second"])

    def _reseed(self, rank, stream):
        self.first._reseed(rank, stream)
        self.second._reseed(rank, stream)

    aggregate = Sparsifier.aggregate


def _sparse_of_chain(packet: Packet) -> Packet:
    """The sparse packet a chain packet stands for, with its values decoded (every
    size checked: the inner packet must be a flat, non-sparse packet of k values)."""
    if not packet.params or not packet.parts:
        raise ValueError("malformed chain packet: it needs the sparse codec's id and an inner packet")
    codec = next((c for c in _SPARSE if codec_id(c).id == packet.params[0]), None)
    if codec is None:
        raise ValueError(f"malformed chain packet: first stage codec id {packet.params[0]} is not one of "
                         f"{ {c: codec_id(c).id for c in _SPARSE} }")
    inner = Packet.from_tensor(packet.parts[-1])
    k = packet.params[1] if len(packet.params) > 1 else -1
    if inner.codec in _SPARSE + ("chain",) or inner.shape != (k,):
        raise ValueError(f"malformed chain packet: the inner packet is a {inner.codec} packet of shape "
                         f"{inner.shape}; expected the {k} values, flat, of a non-sparse codec")
    vals = decode(inner).to(packet.dtype)
    return Packet(codec, packet.shape, packet.dtype, packet.params[1:], (*packet.parts[:-1], to_bytes(vals)))


SPARSE_DECODERS["chain"] = lambda p: sparse_decode(_sparse_of_chain(p))
register_library_codec("chain", lambda p, out=None: _decode_sparse(_sparse_of_chain(p), out),
                       add=lambda p, out, alpha: _add_sparse(_sparse_of_chain(p), out, alpha),
                       sparse=SPARSE_DECODERS["chain"])
