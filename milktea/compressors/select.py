"""Choosing the k largest |x|: exact (deterministic ties) and sampled-threshold (DGC).

Sorting n numbers to keep k of them wastes work. Both selectors here estimate a
threshold from a random sample, keep the candidates above it with one pass over
memory, and only then look closely at the few candidates:

* exact: a threshold chosen low enough that the candidates surely contain the top k,
  then the k-th largest among the candidates; ties at the k-th value are broken
  toward the lowest index, so the result is deterministic and has exactly k entries.
* approximate (DGC): a threshold aimed at k; if the count lands within +-tolerance of
  k it is used as is, otherwise it is trimmed (too many) or lowered (too few).
"""
from __future__ import annotations

import math

import torch

from .. import kernels

SMALL = 1 << 15          # below this many elements, select directly
TARGET_HITS = 4096       # sample elements expected above the threshold
RUN = 16                 # sampled entries read together (one 64-byte cache line of float32)


def kth_largest_sorted_indices(a: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest entries of a (1-D), or of each row of a ([W, n]: [W, k]),
    ties -> lowest index, sorted.

    >>> kth_largest_sorted_indices(torch.tensor([[1., 3, 3, 0], [2, 2, 2, 9]]), 2)
    tensor([[1, 2],
            [0, 3]])
    """
    rows = a if a.dim() == 2 else a.unsqueeze(0)
    W, n = rows.shape
    if k >= n:
        idx = torch.arange(n, device=a.device).expand(W, n)
    else:
        if k <= 1024 or a.device.type != "cpu":
            v = rows.topk(k, dim=1, sorted=True).values[:, -1:]
        else:
            v = rows.kthvalue(n - k + 1, dim=1, keepdim=True).values
        gt, eq = rows > v, rows == v
        # keep everything above the k-th value, then the first (k - #above) ties in index order
        need = k - gt.sum(1, keepdim=True)
        keep = gt | (eq & (eq.cumsum(1) <= need))
        idx = keep.nonzero()[:, 1].view(W, k)
    return idx if a.dim() == 2 else idx[0]


def _top_among(flat: torch.Tensor, cand: torch.Tensor, k: int, vals: torch.Tensor | None = None):
    """(the k of the sorted positions `cand` with the largest |flat| (ties: lowest),
    sorted; flat's values there). vals: flat's values at `cand`, where the caller has
    them already."""
    if vals is None:
        vals = flat.index_select(0, cand)
    top = kernels.topk_among(cand, vals, k, flat.numel())   # a radix select, where the compiled loops run
    if top is not None:
        return top
    keep = kth_largest_sorted_indices(vals.abs(), k)
    return cand[keep], vals[keep]


def sample_size(n: int, k: int, approximate: bool = True) -> int | None:
    """How many of n entries the sampled threshold reads to choose about k of them, or None
    when it does not sample: at or below SMALL entries, or when the sample would be half the
    tensor or more (a sample of at least 65,536 entries, and about TARGET_HITS of them above
    the threshold), where an exact selection costs no more.

    >>> sample_size(100_000, 1_000), sample_size(1_000_000, 10_000)
    (None, 393846)
    """
    if k >= n or n <= SMALL:
        return None
    expect = k + 4.0 * math.sqrt(k) if approximate else 1.1 * k + 4.0 * math.sqrt(k)
    m = _sample_count(n, expect)
    return None if m >= n // 2 else m


def _sample_count(n: int, expect: float) -> int:
    return int(min(n, max(65536, TARGET_HITS * n / max(expect, 1.0))))


def _sample_threshold(flat: torch.Tensor, expect: float, gen: torch.Generator,
                      add: torch.Tensor | None = None) -> float | None:
    """A threshold t with about `expect` entries of |flat (+ add)| above it, from a sample
    (None: too few entries for a sample to pay).

    The sample is made of aligned runs of RUN entries at random places: reading whole
    cache lines costs a fraction of what the same number of scattered reads costs.
    """
    n = flat.numel()
    m = _sample_count(n, expect)
    if m >= n // 2:
        return None
    pick = torch.randint((n - n % RUN) // RUN, (m // RUN,), generator=gen, device="cpu").to(flat.device)
    size = pick.numel() * RUN
    above = min(size - 1, max(0, int(round(expect * size / n))))
    t = kernels.sampled_kth_abs(flat, add, pick, RUN, above + 1)   # a radix select, read in place
    if t is not None:
        return t

    def sample(t):
        return t.reshape(-1)[: n - n % RUN].view(-1, RUN).index_select(0, pick).reshape(-1)
    s = sample(flat) if add is None else sample(flat).add_(sample(add))
    return float(torch.topk(s.abs_(), above + 1, sorted=False).values.min())


def select_topk(flat: torch.Tensor, k: int, *, approximate: bool = False, tolerance: float = 0.05,
                gen: torch.Generator | None = None, add: torch.Tensor | None = None,
                clear_add: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(sorted int64 indices of the top-k |flat|: exactly k, or within tolerance if
    approximate; flat's values there as the selection read them, or None where it did
    not have them: no second read of flat at random).

    add: a tensor like `flat` added to it first, in place (flat += add): error feedback's
    ledger update, fused with the first pass over memory where it can be. A NaN or an
    infinity in the sum raises ValueError. clear_add: zero `add` once it is in flat (in
    the same pass where it can be: the DDP hook overwrites the gradient with the mean next).

    >>> select_topk(torch.tensor([0.5, -3.0, 1.0, 3.0]), 2)[0]     # ties: the lower index first
    tensor([1, 3])
    """
    gen = gen or torch.Generator().manual_seed(0)
    n = flat.numel()
    slack = 4.0 * math.sqrt(k)  # a few standard deviations of the count
    expect = k + slack if approximate else 1.1 * k + slack
    t = _sample_threshold(flat, expect, gen, add) if k < n and n > SMALL else None
    for _attempt in range(3):
        if t is None:
            break
        cand, vals = kernels.above_threshold(flat, t, add, clear_add)
        add = None                       # flat holds the sum from here on
        c = cand.numel()
        if approximate and abs(c - k) <= tolerance * k:
            return cand, vals
        if c >= k:
            return _top_among(flat, cand, k, vals)
        expect *= 2.0 * k / max(c, 1)   # too few above t: aim lower and try again
        t = _sample_threshold(flat, expect, gen)
    if add is not None:
        kernels.add_finite(flat, add)
        if clear_add:
            add.zero_()
    if k >= n:
        return torch.arange(n, device=flat.device), None
    if n > SMALL:      # too dense to sample: every entry is a candidate
        return _top_among(flat, torch.arange(n, device=flat.device), k, flat)
    return kth_largest_sorted_indices(flat.abs(), k), None
