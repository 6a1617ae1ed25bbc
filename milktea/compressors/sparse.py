"""Sparsifiers: send k of the n entries, with their positions.

Packet layout (codec ``topk``): params = (k, index encoding id), parts =
(encoded indices, k values in the gradient's dtype). ``randomk`` sends no indices at
all: every worker regenerates the same positions from the shared seed in its params.
"""
from __future__ import annotations

import weakref

import torch

from .. import index as index_codec
from ..checks import check_choice, check_positive_int, resolve_k
from ..packet import Packet, register_decoder
from .base import Compressor, from_bytes, output, to_bytes
from .select import select_topk

ENCODING_IDS = {name: i for i, name in enumerate(index_codec.ENCODINGS)}


def _selection_view(flat: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 compare exactly in float32; float64 stays float64 so near-ties survive
    return flat if flat.dtype in (torch.float32, torch.float64) else flat.float()


class Sparsifier(Compressor):
    """Shared plumbing of compressors whose packets are (indices, values)."""
    biased = True

    def __init__(self, ratio=None, *, k=None, nonfinite="raise"):
        super().__init__(nonfinite)
        if (ratio is None) == (k is None):
            raise ValueError("give exactly one of ratio (share kept, e.g. 0.01) or k (count kept)")
        if ratio is not None:
            resolve_k(ratio, None, 1)          # validates the ratio now, not at first use
        else:
            check_positive_int(k, "k")
        self.ratio, self.k = ratio, k

    def k_for(self, numel: int) -> int:
        return resolve_k(self.ratio, self.k, numel)

    def select(self, flat: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def sparse_parts(self, tensor: torch.Tensor):
        """(sorted indices, values) this compressor would send for `tensor`."""
        flat = tensor.reshape(-1)
        idx = self.select(flat)
        return idx, flat.index_select(0, idx)

    def _repr_args(self):
        return {"ratio": self.ratio} if self.ratio is not None else {"k": self.k}

    @property
    def name(self) -> str:
        share = f"{100 * self.ratio:g}%" if self.ratio is not None else f"k={self.k}"
        return f"{type(self).__name__.lower()}-{share}"

    @staticmethod
    def sparse_parts_of(packet: Packet):
        """(indices, values) carried by one of this compressor's packets."""
        return sparse_decode(packet)

    def aggregate(self, packets):
        if not packets:
            raise ValueError("aggregate needs at least one packet")
        total = torch.zeros(packets[0].numel, dtype=packets[0].dtype, device=packets[0].device)
        for p in packets:
            idx, vals = sparse_decode(p)
            total.index_add_(0, idx, vals)
        return total.view(packets[0].shape)

    def subtract_sent(self, residual, packet):
        last = getattr(self, "_last", None)
        if last is not None and last[0]() is packet and last[2]() is residual:
            # the packet was just made from this very ledger: its values are the ledger's
            # entries at idx, so crossing them out is exact without decoding the packet
            residual.view(-1).index_fill_(0, last[1], 0)
            return
        idx, vals = sparse_decode(packet)
        residual.view(-1).index_add_(0, idx, -vals.to(residual.dtype))


class TopK(Sparsifier):
    """Keep the k entries of largest magnitude (ties: lowest index first).

    >>> p = TopK(k=2).compress(torch.tensor([0.5, -4.0, 0.1, 3.0]))
    >>> TopK(k=2).decompress(p)
    tensor([ 0., -4.,  0.,  3.])

    ratio: share of entries kept, in (0, 1]; or k: how many.
    approximate: DGC's sampled threshold: the count is within +-`tolerance` of k,
        and the selection skips the exact k-th-value search.
    index: "auto" (the smallest of int32/delta8/varint/bitmap for this packet) or one of them.
    """
    codec = "topk"
    protocol = "allgather"

    def __init__(self, ratio=None, *, k=None, approximate=False, tolerance=0.05, index="auto",
                 seed=0, nonfinite="raise"):
        super().__init__(ratio, k=k, nonfinite=nonfinite)
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
        self.approximate, self.tolerance, self.seed = bool(approximate), tolerance, seed
        self.index = check_choice(index, ("auto",) + index_codec.ENCODINGS, "index")
        self._gen = torch.Generator().manual_seed(seed)

    def _repr_args(self):
        args = super()._repr_args()
        if self.approximate:
            args["approximate"] = True
        if self.index != "auto":
            args["index"] = self.index
        return args

    @property
    def name(self) -> str:
        return ("approx-" if self.approximate else "") + super().name

    def select(self, flat):
        return select_topk(_selection_view(flat), self.k_for(flat.numel()), approximate=self.approximate,
                           tolerance=self.tolerance, gen=self._gen)

    def _compress(self, t):
        idx, vals = self.sparse_parts(t)
        packet = sparse_packet(t, idx, vals, self.index)
        self._last = (weakref.ref(packet), idx, weakref.ref(t))   # error feedback: no decode needed
        return packet


def sparse_packet(t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor, index: str = "auto") -> Packet:
    enc, ibytes = index_codec.encode(idx, t.numel(), index, validate=False)
    return Packet("topk", tuple(t.shape), t.dtype, (idx.numel(), ENCODING_IDS[enc]),
                  (ibytes, to_bytes(vals)))


SPARSE_DECODERS: dict = {}   # other sparse codecs (chain) register here


def sparse_decode(packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) of a sparse packet (topk, randomk, chain)."""
    if packet.codec in SPARSE_DECODERS:
        return SPARSE_DECODERS[packet.codec](packet)
    if packet.codec == "randomk":
        k, seed = packet.params
        return _random_indices(packet.numel, k, seed, packet.device), from_bytes(packet.parts[0], packet.dtype)
    if packet.codec != "topk":
        raise ValueError(f"not a sparse packet: codec {packet.codec!r}")
    k, enc = packet.params
    idx = index_codec.decode(index_codec.ENCODINGS[enc], packet.parts[0], k, packet.numel)
    vals = from_bytes(packet.parts[1], packet.dtype)
    if vals.numel() != k:
        raise ValueError(f"packet announces {k} values but carries {vals.numel()}")
    return idx, vals


def _decode_sparse(packet, out=None):
    res = output(packet, out)
    res.zero_()
    idx, vals = sparse_decode(packet)
    res.view(-1)[idx] = vals
    return res


def _random_indices(n: int, k: int, seed: int, device) -> torch.Tensor:
    """k distinct positions in [0, n), sorted, the same on every machine for a seed."""
    g = torch.Generator().manual_seed(seed)
    if n <= 1 << 20 or 4 * k > n:
        idx = torch.randperm(n, generator=g)[:k]
    else:  # draw with replacement, dedupe, keep a random k of the distinct ones
        draw = torch.unique(torch.randint(n, (k + k // 4 + 64,), generator=g))
        while draw.numel() < k:
            draw = torch.unique(torch.cat([draw, torch.randint(n, (k,), generator=g)]))
        idx = draw[torch.randperm(draw.numel(), generator=g)[:k]]
    return idx.sort().values.to(device)


class RandomK(Sparsifier):
    """Keep k positions chosen at random, the same on every worker at each step.

    The positions come from a seed shared by all workers (``seed`` plus a step
    counter), so the packet carries only the seed, not the indices. Unlike Top-K,
    the choice ignores magnitudes: useful as a baseline.

    >>> RandomK(k=2, seed=1).compress(torch.arange(1., 9.)).params[0]
    2
    """
    codec = "randomk"
    protocol = "allgather"

    def __init__(self, ratio=None, *, k=None, seed=0, nonfinite="raise"):
        super().__init__(ratio, k=k, nonfinite=nonfinite)
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.step = 0

    def select(self, flat):
        return _random_indices(flat.numel(), self.k_for(flat.numel()), self._step_seed(), flat.device)

    def _step_seed(self) -> int:
        return (self.seed * 1_000_003 + self.step) % (1 << 62)

    def _compress(self, t):
        flat = t.reshape(-1)
        seed = self._step_seed()
        idx = _random_indices(flat.numel(), self.k_for(flat.numel()), seed, flat.device)
        self.step += 1
        packet = Packet("randomk", tuple(t.shape), t.dtype, (idx.numel(), seed), (to_bytes(flat[idx]),))
        self._last = (weakref.ref(packet), idx, weakref.ref(t))
        return packet

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = int(state["step"])


register_decoder("topk", _decode_sparse)
register_decoder("randomk", _decode_sparse)
