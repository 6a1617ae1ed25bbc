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
from .base import Compressor, check_same_kind
from .codec import SPARSE_EXPANSION, lookup
from .packet import _ITEMSIZE, Packet
from .registry import library_codec
from .wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes
from .select import kth_largest_sorted_indices, select_topk

ENCODING_IDS = {name: i for i, name in enumerate(index_codec.ENCODINGS)}


def _selection_view(flat: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 compare exactly in float32; float64 stays float64 so near-ties survive
    return flat if flat.dtype in (torch.float32, torch.float64) else flat.float()


class Sparsifier(Compressor):
    """Shared plumbing of compressors whose packets are (indices, values).

    A subclass says which positions to send: `select(flat, row) -> (sorted indices, flat's
    values there or None)`, which `encode` calls for every row once error feedback's
    gradient is in it. The packet carries the row's own values there, so error feedback
    crosses them out of the ledger exactly (`encode`'s sent: the positions) and the mean
    of the ranks' packets writes only the listed entries. (`TopK` writes its own encode,
    its selection fused with the gradient's add: to choose positions another way, derive
    from Sparsifier.)
    """
    biased = True
    carries_nonfinite = True        # the values are sent as they are

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
        key = (self.ratio, self.k, numel)      # DGC's warm-up changes the ratio between calls
        k = self.__dict__.get("_k")
        if k is None or k[0] != key:
            k = self._k = (key, resolve_k(self.ratio, self.k, numel))
        return k[1]

    def select(self, flat: torch.Tensor, row: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the sorted flat positions this call sends, advancing any per-call state; flat's
        values there where the selection read them, else None). row: which of `encode`'s
        rows (its random stream, see `Compressor.rows`)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def _compress(self, t):
        return self._packet(t, *self.select(t.reshape(-1)))

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """error feedback's gradient added, then each row's positions (`select`), its values
        there sent as they are."""
        W = rows.shape[0]
        self.rows(W)
        if add is not None:
            self._add(rows, add, clear_add)
        flat = rows.reshape(W, -1)
        packets, sent = [], []
        for w in range(W):
            idx, vals = self.select(flat[w], row=w)
            packets.append(self._packet(rows[w], idx, vals))
            sent.append((idx, None))
        return packets, sent

    def _packet(self, t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor | None) -> Packet:
        raise NotImplementedError  # pragma: no cover - abstract; vals: t's values at idx, if known

    def sparse_parts(self, tensor: torch.Tensor):
        """(sorted indices, values) this compressor would send for `tensor`."""
        flat = tensor.reshape(-1)
        idx = self.select(flat)[0]
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

    def select(self, flat, row=0):
        """The k largest |flat| (see `select_topk`), with their values from the selection's
        own pass where it reads flat itself (no second, random read)."""
        return self._choose(flat, None, False, row)

    def _choose(self, flat, add, clear_add, row):
        """`select`, with `add` (error feedback's update of its ledger `flat`) added in the
        selection's first pass (and zeroed with `clear_add`) where flat and add are float32
        or float64 alike and a NaN must raise; otherwise added first."""
        plain = self.nonfinite != "ignore" and flat.dtype in (torch.float32, torch.float64)
        if add is not None and not (plain and self.nonfinite == "raise" and add.dtype == flat.dtype):
            self._add(flat, add, clear_add)
            add = None
        gen = self._gen if row == 0 else self.row(row)._gen
        cached = self.__dict__.get("_k")
        n = flat.numel()
        k = cached[1] if cached is not None and cached[0] == (self.ratio, self.k, n) else self.k_for(n)
        if add is not None and trace.ENABLED:
            trace.note(step="fused add and clear" if clear_add else "fused add")
        if plain:
            return select_topk(flat, k, approximate=self.approximate, tolerance=self.tolerance, gen=gen,
                               add=add, clear_add=clear_add)
        view = _selection_view(flat)
        if self.nonfinite == "ignore" and not bool(torch.isfinite(view).all()):
            view = torch.nan_to_num(view, nan=float("inf"))   # NaN counts as the largest (as torch.topk)
        return select_topk(view, k, approximate=self.approximate, tolerance=self.tolerance, gen=gen)[0], None

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """Row by row, error feedback's gradient added in the selection's first pass over
        the ledger; or every row at once where that pays: several rows of an exact selection
        too small for the compiled loops are chosen by one torch selection over the [W, n]
        matrix (the same positions: the k largest, ties to the lowest index)."""
        W, n = rows.shape[0], rows[0].numel()
        if (W == 1 or self.approximate or self.nonfinite == "ignore" or kernels.would_use_numba(n, rows.device)
                or rows.dtype not in (torch.float32, torch.float64)):
            if W > 1:
                self.rows(W)
            flat, adds = rows.reshape(W, -1), (add.reshape(W, -1) if add is not None else None)
            packets, sent = [], []
            for w in range(W):
                idx, vals = self._choose(flat[w], adds[w] if adds is not None else None, clear_add, w)
                packets.append(self._packet(rows[w], idx, vals))
                sent.append((idx, None))
            return packets, sent
        if add is not None:
            self._add(rows, add, clear_add)
        X = rows.view(W, n)
        idx = kth_largest_sorted_indices(X.abs(), self.k_for(n))
        vals = X.gather(1, idx)
        shape, k = tuple(rows.shape[1:]), idx.shape[1]
        packets = [Packet("topk", shape, rows.dtype, (k, ENCODING_IDS[enc]), (ibytes, to_bytes(vals[w])))
                   for w, (enc, ibytes) in enumerate(index_codec.encode_rows(idx, n, self.index))]
        return packets, [(idx[w], None) for w in range(W)]

    def _packet(self, t, idx, vals=None):
        """vals: t's values at idx where the caller has them (else gathered here)."""
        if vals is None or vals.dtype != t.dtype:
            vals = t.reshape(-1).index_select(0, idx)
        enc, ibytes = index_codec.encode(idx, t.numel(), self.index, validate=False)
        return Packet("topk", tuple(t.shape), t.dtype, (idx.numel(), ENCODING_IDS[enc]),
                      (ibytes, vals.contiguous().view(torch.uint8)))


def sparse_packet(t: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor, index: str = "auto") -> Packet:
    """The topk packet of `t`'s values `vals` at the sorted positions `idx`."""
    enc, ibytes = index_codec.encode(idx, t.numel(), index, validate=False)
    return Packet("topk", tuple(t.shape), t.dtype, (idx.numel(), ENCODING_IDS[enc]),
                  (ibytes, to_bytes(vals)))


SEED_LIMIT = 1 << 62         # a randomk packet's seed is below this (the format's rule)


def _check_k(packet, k: int) -> None:
    if not 1 <= k <= packet.numel:
        raise ValueError(f"malformed {packet.codec} packet: k={k} for {packet.numel} elements "
                         f"(1 <= k <= numel)")


def sparse_decode(packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) of a sparse packet (topk, randomk, chain: its codec's `sparse`),
    every size checked."""
    parts = lookup(packet.codec).sparse
    if parts is None:
        raise ValueError(f"not a sparse packet: codec {packet.codec!r}")
    return parts(packet)


def _randomk_parts(packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
    vals = _randomk_parts_values(packet)
    return _random_indices(packet.numel, vals.numel(), packet.params[1], packet.device), vals


def _randomk_parts_values(packet: Packet) -> torch.Tensor:
    size = torch.empty((), dtype=packet.dtype).element_size()
    expect_layout(packet, 2, 1)
    k, seed = packet.params
    _check_k(packet, k)
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"malformed randomk packet: seed {seed} (RandomK's seeds are below 2**62)")
    expect_nbytes(packet, 0, k * size, f"{k} {packet.dtype} values")
    return from_bytes(packet.parts[0], packet.dtype)


def _topk_parts(packet: Packet) -> tuple[torch.Tensor, torch.Tensor]:
    size = _ITEMSIZE[packet.dtype]
    params, parts = packet.params, packet.parts
    if len(params) != 2 or len(parts) != 2 or not 1 <= params[0] <= packet.numel \
            or params[1] >= len(index_codec.ENCODINGS) or parts[1].numel() != params[0] * size:
        _refuse_topk(packet, size)
    k, enc = params
    idx = index_codec.decode(index_codec.ENCODINGS[enc], parts[0], k, packet.numel)
    vals = parts[1]
    return idx, (vals if vals.storage_offset() % size == 0 else vals.clone()).view(packet.dtype)


def _refuse_topk(packet: Packet, size: int):
    """The ValueError that says what is wrong with a malformed topk packet."""
    expect_layout(packet, 2, 2)
    k, enc = packet.params
    _check_k(packet, k)
    if enc >= len(index_codec.ENCODINGS):
        raise ValueError(f"malformed topk packet: index encoding id {enc} (known: "
                         f"{dict(enumerate(index_codec.ENCODINGS))})")
    expect_nbytes(packet, 1, k * size, f"{k} {packet.dtype} values")


def _decode_sparse(packet, out=None):
    idx, vals = lookup(packet.codec).sparse(packet)
    res = output(packet, out)
    res.zero_()
    res.view(-1).index_copy_(0, idx, vals.to(res.dtype))   # sorted unique indices: half index_put's time
    return res


def _add_sparse(packet, out, alpha):
    idx, vals = lookup(packet.codec).sparse(packet)
    out.view(-1).index_add_(0, idx, vals.to(out.dtype), alpha=alpha)


def _topk_rows(packets):
    """([W, k] positions, [W, k] values) of several topk packets of one tensor, those of
    delta8 indices decoded together (see index.decode_rows); None where they differ in k,
    shape or dtype, or where the compiled loops take each packet."""
    first = packets[0]
    if first.numel >= kernels.NUMBA_MIN_NUMEL and kernels.USE_NUMBA and first.device.type == "cpu":
        return None                  # the compiled decoder and merge take each packet as it is
    for p in packets:
        if len(p.params) != 2 or len(p.parts) != 2 or p.params[0] != first.params[0] or p.shape != first.shape \
                or p.dtype != first.dtype:
            return None
    k = first.params[0]
    _check_k(first, k)
    size = torch.empty((), dtype=first.dtype).element_size()
    for p in packets:
        expect_nbytes(p, 1, k * size, f"{k} {p.dtype} values")
    d8 = [w for w, p in enumerate(packets) if p.params[1] == ENCODING_IDS["delta8"]]
    together = index_codec.decode_rows([packets[w].parts[0] for w in d8], k, first.numel) if d8 else None
    rows = dict(zip(d8, together)) if together is not None else {}
    idx = torch.stack([rows[w] if w in rows else _topk_parts(p)[0] for w, p in enumerate(packets)])
    return idx, torch.stack([from_bytes(p.parts[1], p.dtype) for p in packets])


def _randomk_rows(packets):
    """Several randomk packets of one step: their positions drawn once."""
    first = packets[0]
    if any(p.params != first.params or p.shape != first.shape or p.dtype != first.dtype for p in packets):
        return None
    idx, _ = _randomk_parts(first)
    return idx.expand(len(packets), -1), torch.stack([_randomk_parts_values(p) for p in packets])


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

    def select(self, flat, row=0):
        idx = _random_indices(flat.numel(), self.k_for(flat.numel()), self._step_seed(), flat.device)
        self.step += 1
        return idx, None

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        """The same positions for every row (the workers agree on them), one step a call."""
        if add is not None:
            self._add(rows, add, clear_add)
        W = rows.shape[0]
        seed = self._step_seed()
        idx = self.select(rows[0].reshape(-1))[0]
        packets = [Packet("randomk", tuple(rows.shape[1:]), rows.dtype, (idx.numel(), seed),
                          (to_bytes(rows[w].reshape(-1).index_select(0, idx)),)) for w in range(W)]
        return packets, [(idx, None)] * W

    def _step_seed(self, step: int | None = None) -> int:
        return (self.seed * 1_000_003 + (self.step if step is None else step)) % SEED_LIMIT

    def state_dict(self):
        return {**super().state_dict(), "step": self.step}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.step = check_positive_int(state.get("step"), "the saved step", minimum=0)


def _sparse_cost(compressor, shape, dtype) -> int:
    """Payload bytes of a sparse packet: k values, and (Top-K) the smallest index encoding
    of k positions spread evenly (gaps of n / k)."""
    n = 1
    for d in shape:
        n *= d
    k = compressor.k_for(n)
    values = k * torch.empty((), dtype=dtype).element_size()
    if compressor.codec == "randomk":
        return values
    gap = n // k - 1
    sizes = {"int32": 4 * k, "delta8": k * (1 + gap // index_codec.ESCAPE),
             "varint": k * max(1, -(-gap.bit_length() // 7)), "bitmap": (n + 7) // 8}
    return values + (min(sizes.values()) if compressor.index == "auto" else sizes[compressor.index])


TOPK = library_codec(TopK, 1, SPARSE_EXPANSION, _decode_sparse, add=_add_sparse, sparse=_topk_parts,
                     rows=_topk_rows, cost=_sparse_cost, schemes={
                         "topk": ("Top-{pct}+EF", lambda ratio, rank: TopK(ratio), True),
                         "topk-approx": ("approx Top-{pct}+EF", lambda ratio, rank: TopK(ratio, approximate=True), True)})
RANDOMK = library_codec(RandomK, 2, SPARSE_EXPANSION, _decode_sparse, add=_add_sparse, sparse=_randomk_parts,
                        rows=_randomk_rows, cost=_sparse_cost, schemes={"randomk": ("Random-{pct}+EF", lambda ratio, rank: RandomK(ratio), True)})
