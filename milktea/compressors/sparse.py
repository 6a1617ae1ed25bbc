"""Sparsifiers: send k of the n entries, with their positions.

Packet layout (codec ``topk``): params = (k, index encoding id), parts =
(encoded indices, k values in the gradient's dtype). ``randomk`` sends no indices at
all: every worker regenerates the same positions from the shared seed in its params.
"""
from __future__ import annotations

import torch

from .. import index as index_codec
from .. import kernels, stochastic, trace
from ..checks import check_choice, check_number, check_positive_int, check_ratio, check_seed, resolve_k
from ..packet import Packet
from .base import Compressor, check_same_kind
from .registry import register_library_codec
from .wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes
from .select import select_topk

ENCODING_IDS = {name: i for i, name in enumerate(index_codec.ENCODINGS)}


def _selection_view(flat: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 compare exactly in float32; float64 stays float64 so near-ties survive
    return flat if flat.dtype in (torch.float32, torch.float64) else flat.float()


class Sparsifier(Compressor):
    """Shared plumbing of compressors whose packets are (indices, values).

    A subclass says which positions to send: `select(flat) -> sorted indices`. The packet
    carries the input's own values there, so error feedback crosses them out of the
    ledger exactly (the "exact_step" fast path) and the mean of the ranks' packets writes
    only the listed entries ("clears_gradient").
    """
    biased = True
    carries_nonfinite = True        # the values are sent as they are
    fast_paths = frozenset({"codec_mean", "exact_step", "clears_gradient"})

    def __init__(self, ratio=None, *, k=None, nonfinite="raise"):
        super().__init__(nonfinite)
        if (ratio is None) == (k is None):
            raise ValueError("give exactly one of ratio (share kept, e.g. 0.01) or k (count kept)")
        if ratio is not None:     # checked now, not at first use; kept as a Python float
            ratio = check_ratio(ratio)
        else:
            k = check_positive_int(k, "k")
        self.ratio, self.k = ratio, k

    def k_for(self, numel: int) -> int:
        return resolve_k(self.ratio, self.k, numel)

    def select(self, flat: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _choose(self, flat: torch.Tensor, add: torch.Tensor | None = None, clear_add: bool = False):
        """(the sorted positions to send this call, flat's values there or None) (advances
        any per-call state). add: only with the "fused_add" fast path: added to `flat` in
        place first (and zeroed after with `clear_add`) in the selection's own pass."""
        return self.select(flat), None

    def _pack(self, t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor | None = None) -> Packet:
        raise NotImplementedError  # pragma: no cover - abstract; vals: t's values at idx, if known

    def _compress(self, t):
        return self._pack(t, *self._choose(t.reshape(-1)))

    def compress_with_feedback(self, residual, dtype=None, grad=None, clear_grad=False):
        """Send the chosen entries and cross them out of `residual` directly: the values
        sent are the residual's own entries, so zeroing them is exact and no packet is
        decoded (with a narrower wire `dtype`, the rounding remainder stays instead).
        With `grad` and the "fused_add" fast path (Top-K), the selection adds it in its
        first pass over memory, and zeroes it there too with `clear_grad`."""
        if "exact_step" not in self.fast_paths:      # a subclass changed what is sent
            return super().compress_with_feedback(residual, dtype, grad, clear_grad)
        if not isinstance(residual, torch.Tensor) or not residual.is_contiguous():
            raise ValueError("the residual must be a contiguous tensor (error feedback's ledger)")
        fuse = grad is not None and self._fuses(residual, grad, dtype)
        if trace.ENABLED:
            trace.note(step=("fused add and clear" if clear_grad else "fused add") if fuse else "exact step")
        if grad is not None and not fuse:
            self.add_to_ledger(residual, grad)
            if clear_grad:
                grad.detach().zero_()
        x = residual if dtype in (None, residual.dtype) else residual.to(dtype)
        with torch.no_grad():
            add = grad.detach().reshape(-1) if fuse else None
            idx, vals = self._choose(x.reshape(-1), add, clear_add=fuse and clear_grad)
            packet = self._pack(x, idx, vals)
            flat = residual.view(-1)
            if x is residual:
                kernels.zero_at(flat, idx)
            else:
                flat.index_add_(0, idx, x.reshape(-1).index_select(0, idx).to(flat.dtype), alpha=-1)
        return packet

    def _fuses(self, residual, grad, dtype) -> bool:
        """Whether the selection may add `grad` into the ledger itself: the "fused_add" fast
        path, a NaN that must raise (not be chosen), and one float32/float64 dtype for the
        ledger, the gradient and the wire (the selection reads the ledger in place)."""
        return ("fused_add" in self.fast_paths and self.nonfinite == "raise" and dtype in (None, residual.dtype)
                and residual.dtype in (torch.float32, torch.float64) and grad.dtype == residual.dtype)

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
        check_same_kind(packets)
        total = torch.zeros(packets[0].numel, dtype=packets[0].dtype, device=packets[0].device)
        for p in packets:
            idx, vals = sparse_decode(p)
            total.index_add_(0, idx, vals)
        return total.view(packets[0].shape)


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
    fast_paths = Sparsifier.fast_paths | {"fused_add"}

    def __init__(self, ratio=None, *, k=None, approximate=False, tolerance=0.05, index="auto",
                 seed=0, nonfinite="raise"):
        super().__init__(ratio, k=k, nonfinite=nonfinite)
        tolerance = check_number(tolerance, "tolerance", 0, 1, open_low=True, open_high=True)
        self.approximate, self.tolerance, self.seed = bool(approximate), tolerance, check_seed(seed)
        self.index = check_choice(index, ("auto",) + index_codec.ENCODINGS, "index")
        self._gen = torch.Generator().manual_seed(self.seed)

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
        view = _selection_view(flat)
        if self.nonfinite == "ignore" and not bool(torch.isfinite(view).all()):
            view = torch.nan_to_num(view, nan=float("inf"))   # NaN counts as the largest (as torch.topk)
        return select_topk(view, self.k_for(flat.numel()), approximate=self.approximate,
                           tolerance=self.tolerance, gen=self._gen)[0]

    def _choose(self, flat, add=None, clear_add=False):
        """(positions, values): the values come from the selection's own pass (no second,
        random read of flat) where it reads flat itself; with `add` (the "fused_add" path:
        error feedback's update of the ledger `flat`) always."""
        plain = self.nonfinite != "ignore" and flat.dtype in (torch.float32, torch.float64)
        if add is None and not (plain and type(self).select is TopK.select):
            return self.select(flat), None    # a subclass's own select, or a float32 copy compared
        return select_topk(flat, self.k_for(flat.numel()), approximate=self.approximate,
                           tolerance=self.tolerance, gen=self._gen, add=add, clear_add=clear_add)

    def _pack(self, t, idx, vals=None):
        """vals: t's values at idx where the caller has them (else gathered here)."""
        if vals is None or vals.dtype != t.dtype:
            vals = t.reshape(-1).index_select(0, idx)
        return sparse_packet(t, idx, vals, self.index)


def sparse_packet(t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor, index: str = "auto") -> Packet:
    enc, ibytes = index_codec.encode(idx, t.numel(), index, validate=False)
    return Packet("topk", tuple(t.shape), t.dtype, (idx.numel(), ENCODING_IDS[enc]),
                  (ibytes, to_bytes(vals)))


SPARSE_DECODERS: dict = {}   # other sparse codecs (chain) register here
SEED_LIMIT = 1 << 62         # a randomk packet's seed is below this (the format's rule)


def _check_k(packet, k: int) -> None:
    if not 1 <= k <= packet.numel:
        raise ValueError(f"malformed {packet.codec} packet: k={k} for {packet.numel} elements "
                         f"(1 <= k <= numel)")


def sparse_decode(packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) of a sparse packet (topk, randomk, chain), every size checked."""
    if packet.codec in SPARSE_DECODERS:
        return SPARSE_DECODERS[packet.codec](packet)
    size = torch.empty((), dtype=packet.dtype).element_size()
    if packet.codec == "randomk":
        expect_layout(packet, 2, 1)
        k, seed = packet.params
        _check_k(packet, k)
        if not 0 <= seed < SEED_LIMIT:
            raise ValueError(f"malformed randomk packet: seed {seed} (RandomK's seeds are below 2**62)")
        expect_nbytes(packet, 0, k * size, f"{k} {packet.dtype} values")
        return _random_indices(packet.numel, k, seed, packet.device), from_bytes(packet.parts[0], packet.dtype)
    if packet.codec != "topk":
        raise ValueError(f"not a sparse packet: codec {packet.codec!r}")
    expect_layout(packet, 2, 2)
    k, enc = packet.params
    _check_k(packet, k)
    if enc >= len(index_codec.ENCODINGS):
        raise ValueError(f"malformed topk packet: index encoding id {enc} (known: "
                         f"{dict(enumerate(index_codec.ENCODINGS))})")
    expect_nbytes(packet, 1, k * size, f"{k} {packet.dtype} values")
    idx = index_codec.decode(index_codec.ENCODINGS[enc], packet.parts[0], k, packet.numel)
    return idx, from_bytes(packet.parts[1], packet.dtype)


def _decode_sparse(packet, out=None):
    idx, vals = sparse_decode(packet)
    res = output(packet, out)
    res.zero_()
    res.view(-1).index_copy_(0, idx, vals.to(res.dtype))   # sorted unique indices: half index_put's time
    return res


def _add_sparse(packet, out, alpha):
    idx, vals = sparse_decode(packet)
    out.view(-1).index_add_(0, idx, vals.to(out.dtype), alpha=alpha)


def _random_indices(n: int, k: int, seed: int, device) -> torch.Tensor:
    """k distinct positions in [0, n), sorted, the same on every machine for a seed."""
    if n <= 1 << 20 or 4 * k > n or n >= 1 << 31:
        g = torch.Generator().manual_seed(seed)
        return torch.randperm(n, generator=g)[:k].sort().values.to(device)
    # hashed draws, duplicates skipped: one pass, no sort (see stochastic.random_positions)
    return stochastic.random_positions(n, k, seed).to(device)


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
        self.seed = check_seed(seed)
        self.step = 0

    def select(self, flat):
        return _random_indices(flat.numel(), self.k_for(flat.numel()), self._step_seed(), flat.device)

    def _step_seed(self, step: int | None = None) -> int:
        return (self.seed * 1_000_003 + (self.step if step is None else step)) % SEED_LIMIT

    def _choose(self, flat, add=None, clear_add=False):
        idx = self.select(flat)
        self.step += 1
        return idx, None

    def _pack(self, t, idx, vals=None):
        seed = self._step_seed(self.step - 1)     # the seed _choose just used
        return Packet("randomk", tuple(t.shape), t.dtype, (idx.numel(), seed),
                      (to_bytes(t.reshape(-1).index_select(0, idx)),))

    def state_dict(self):
        return {**super().state_dict(), "step": self.step}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.step = check_positive_int(state.get("step"), "the saved step", minimum=0)


register_library_codec("topk", _decode_sparse, add=_add_sparse, sparse=sparse_decode)
register_library_codec("randomk", _decode_sparse, add=_add_sparse, sparse=sparse_decode)
