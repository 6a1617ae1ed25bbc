"""Chain: sparsify, then compress the kept values (e.g. Top-K, then 8-bit values).

The two families stack: Top-K decides *which* entries travel, a quantizer decides
*how many bits* each of them takes. Packet (codec ``chain``): params = (codec id of
the sparse packet, its params...), parts = (its index parts..., the inner packet of
the values, whole, header included).
"""
from __future__ import annotations

import torch

from .base import Compressor
from .codec import SPARSE_EXPANSION, lookup
from .packet import Packet
from .registry import decode, library_codec
from .wire import from_bytes, to_bytes
from .quantize import Quantize
from .sparse import Sparsifier, TopK, _add_sparse, _decode_sparse, _sparse_cost, sparse_decode

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

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """The first stage's packets (Top-K adds error feedback's gradient in its own pass),
        then each row's values compressed by the second stage; what was sent at the first
        stage's positions is the second stage's decoded values (their rounding stays in a
        ledger)."""
        chains = self.rows(rows.shape[0])
        sparse, where = self.first.encode(rows, add=add, clear_add=clear_add)
        packets, sent = [], []
        for w, (sp, (idx, _own)) in enumerate(zip(sparse, where)):
            vals = from_bytes(sp.parts[-1], sp.dtype)         # the values the first stage kept
            inner = chains[w].second.compress(vals)
            packets.append(self._wrap(rows[w], sp, inner))
            sent.append((idx, decode(inner).to(rows.dtype)))
        return packets, sent

    def _compress(self, t):
        sparse = self.first.compress(t)
        return self._wrap(t, sparse, self.second.compress(from_bytes(sparse.parts[-1], sparse.dtype)))

    @staticmethod
    def _wrap(t, sparse, inner):
        return Packet("chain", tuple(t.shape), t.dtype, (lookup(sparse.codec).id, *sparse.params),
                      (*sparse.parts[:-1], inner.to_tensor()))

    def state_dict(self):
        return {"first": self.first.state_dict(), "second": self.second.state_dict()}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or set(state) != {"first", "second"}:
            raise ValueError("a Chain's state holds its two stages' states: {'first': ..., 'second': ...}")
        self.first.load_state_dict(state["first"])
        self.second.load_state_dict(state["second"])

    def _reseed(self, rank, stream):
        self._at = (rank, stream)
        self.first._reseed(rank, stream)
        self.second._reseed(rank, stream)

    aggregate = Sparsifier.aggregate


def _sparse_of_chain(packet: Packet) -> Packet:
    """The sparse packet a chain packet stands for, with its values decoded (every
    size checked: the inner packet must be a flat, non-sparse packet of k values)."""
    if not packet.params or not packet.parts:
        raise ValueError("malformed chain packet: it needs the sparse codec's id and an inner packet")
    codec = next((c for c in _SPARSE if lookup(c).id == packet.params[0]), None)
    if codec is None:
        raise ValueError(f"malformed chain packet: first stage codec id {packet.params[0]} is not one of "
                         f"{ {c: lookup(c).id for c in _SPARSE} }")
    inner = Packet.from_tensor(packet.parts[-1])
    k = packet.params[1] if len(packet.params) > 1 else -1
    if inner.codec in _SPARSE + ("chain",) or inner.shape != (k,):
        raise ValueError(f"malformed chain packet: the inner packet is a {inner.codec} packet of shape "
                         f"{inner.shape}; expected the {k} values, flat, of a non-sparse codec")
    vals = decode(inner).to(packet.dtype)
    return Packet(codec, packet.shape, packet.dtype, packet.params[1:], (*packet.parts[:-1], to_bytes(vals)))


def _chain_cost(chain, shape, dtype) -> int:
    """The first stage's positions, its k values as the second stage's packet (header included)."""
    n = 1
    for d in shape:
        n *= d
    k = chain.first.k_for(n)
    values = k * torch.empty((), dtype=dtype).element_size()
    inner = lookup(chain.second.codec).cost(chain.second, (k,), dtype)
    return _sparse_cost(chain.first, shape, dtype) - values + inner + 20     # the inner header: ~20 bytes


CHAIN = library_codec(Chain, 9, SPARSE_EXPANSION, lambda p, out=None: _decode_sparse(_sparse_of_chain(p), out),
                      add=lambda p, out, alpha: _add_sparse(_sparse_of_chain(p), out, alpha),
                      sparse=lambda p: sparse_decode(_sparse_of_chain(p)), cost=_chain_cost, schemes={
                          "topk-int8": ("Top-{pct}+int8+EF", lambda ratio, rank: Chain(TopK(ratio), Quantize(8)), True)})
