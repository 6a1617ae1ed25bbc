"""Chapter 03's numbers: finding the K biggest entries, what their positions cost, and how
much of the gradient they carry.

    >>> x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3])
    >>> sorted(int(i) for i in selectors(2)["torch.topk"](x))
    [1, 3]
    >>> s, share = norm_share_curve(x)
    >>> round(float(share[1]), 3)             # the top 40% (2 of 5) carry 99.6% of ||x||^2
    0.996
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .. import index as index_codec
from ..checks import check_grad, check_k, check_ratio
from ..compressors import TopK
from ..device import pick_device
from ..timing import median, time_it


def selectors(k: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Four ways to find the k largest |x|, each returning the chosen positions.

    full sort: sort all n magnitudes, keep the first k (n log n work).
    partition: numpy's argpartition (introselect): puts the k largest at the end in
        linear expected time, without ordering them (CPU only).
    torch.topk: PyTorch's own selection kernel.
    sampled threshold: DGC's trick, milktea's TopK(approximate=True): estimate the
        threshold from a random sample, keep everything above it in one pass; the count
        lands within a few % of k instead of exactly k.
    """
    check_k(k, 1 << 62)
    approx = TopK(k=k, approximate=True)

    def full_sort(x):
        return torch.sort(x.abs(), descending=True).indices[:k]

    def partition(x):
        a = np.abs(x.detach().cpu().numpy())
        return torch.from_numpy(np.argpartition(a, a.size - k)[a.size - k:])

    def topk(x):
        return torch.topk(x.abs(), k, sorted=False).indices

    def sampled(x):
        return approx.select(x)

    return {"full sort": full_sort, "partition": partition, "torch.topk": topk, "sampled threshold": sampled}


@dataclass
class SelectionTiming:
    """Median seconds of each selector at each size, and how many entries each returned."""
    sizes: list[int]
    density: float
    device: str
    threads: int
    times: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, list[int]] = field(default_factory=dict)

    def speedup(self, name: str, over: str = "full sort") -> list[float]:
        return [a / b for a, b in zip(self.times[over], self.times[name])]

    def __repr__(self) -> str:
        last = {k: f"{v[-1] * 1e3:.3g} ms" for k, v in self.times.items()}
        return (f"SelectionTiming(n={self.sizes[-1]:,}, density {self.density:g}, {self.device}, "
                f"{self.threads} thread(s): {last})")


def time_selection(sizes=(10_000, 100_000, 1_000_000), density: float = 0.01, repeats: int = 3,
                   device=None, seed: int = 0, threads: int | None = 1) -> SelectionTiming:
    """Time every selector on the same random tensor of each size (median of `repeats`,
    after one warm-up call). The tensor is Gaussian: how long selection takes hardly
    depends on the values. Timings vary from run to run and machine to machine.

    threads: CPU threads while timing (1 by default: this compares the algorithms, not the
    thread pools, and stays steady when other programs share the cores; None: as is)."""
    check_ratio(density)
    if threads is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return time_selection(sizes, density, repeats, device, seed, threads=None)
        finally:
            torch.set_num_threads(old)
    device = pick_device() if device is None else torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    gen = torch.Generator().manual_seed(seed)
    res = SelectionTiming([int(n) for n in sizes], density, str(device), torch.get_num_threads())
    for n in res.sizes:
        x = torch.randn(n, generator=gen).to(device)
        k = max(1, int(round(density * n)))
        for name, fn in selectors(k).items():
            if name == "partition" and device.type != "cpu":
                continue        # a GPU tensor would be copied to the host first: not a fair race
            out = fn(x)   # the warm-up call; its count is reported
            ts = time_it(lambda fn=fn, x=x: fn(x), repeat=repeats, warmup=0, sync=sync)
            res.times.setdefault(name, []).append(median(ts))
            res.counts.setdefault(name, []).append(int(out.numel()))
    return res


def _topk_indices(tensor: torch.Tensor, k: int) -> torch.Tensor:
    flat = tensor.reshape(-1)
    return TopK(k=k).select(flat)


def index_cost(tensor: torch.Tensor, densities=(0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3)) -> list[dict]:
    """For each density s = K/N: the exact bytes of each index encoding for the Top-K
    positions of `tensor`, the bytes of the K values, and the packet milktea really sends
    (its `auto` encoding picks the smallest)."""
    g = check_grad(tensor).reshape(-1)
    n = g.numel()
    rows = []
    for s in densities:
        k = max(1, int(round(check_ratio(s) * n)))
        idx = _topk_indices(g, k)
        sizes = index_codec.sizes(idx, n)
        packet = TopK(k=k).compress(g)
        rows.append({"density": k / n, "k": k, **{f"{e} bytes": sizes[e] for e in index_codec.ENCODINGS},
                     "value bytes": k * g.element_size(), "packet bytes": packet.nbytes,
                     "encoding": index_codec.ENCODINGS[packet.params[1]],
                     "R": n * g.element_size() / packet.nbytes})
    return rows


def norm_share_curve(tensor: torch.Tensor, points: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Share of ||g||^2 carried by the largest fraction s of the entries, for every s
    (or `points` values of s on a log scale). Random-K keeps s of it on average."""
    g = check_grad(tensor).reshape(-1).double()
    sq = torch.sort(g.pow(2), descending=True).values
    total = float(sq.sum())
    if total == 0:
        raise ValueError("the tensor is all zeros: no entry carries any norm")
    share = (torch.cumsum(sq, 0) / total).cpu().numpy()
    n = g.numel()
    s = np.arange(1, n + 1) / n
    if points is not None:
        pick = np.unique(np.clip(np.round(np.logspace(0, np.log10(n), points)).astype(int), 1, n)) - 1
        s, share = s[pick], share[pick]
    return s, share


def share_at(tensor: torch.Tensor, densities) -> dict[float, float]:
    """Share of ||g||^2 in the top s of the entries, for each s in `densities`."""
    s, share = norm_share_curve(tensor)
    n = len(s)
    return {d: float(share[max(1, int(round(check_ratio(d) * n))) - 1]) for d in densities}


def randomk_energy(tensor: torch.Tensor, density: float, trials: int = 20, seed: int = 0) -> float:
    """Mean share of ||g||^2 that Random-K keeps (measured over `trials` draws; about s)."""
    g = check_grad(tensor).reshape(-1).double()
    n = g.numel()
    k = max(1, int(round(check_ratio(density) * n)))
    gen = torch.Generator().manual_seed(seed)
    total = float(g.pow(2).sum())
    return float(np.mean([float(g[torch.randperm(n, generator=gen)[:k]].pow(2).sum()) / total
                          for _ in range(trials)]))


def averaged_error(tensor: torch.Tensor, density: float, draws=(1, 4, 16, 64), seed: int = 0) -> dict:
    """Relative error of the mean of many compressed copies of the same tensor:
    Random-K scaled by N/K (unbiased: its errors average out) against Top-K (biased: the
    same entries are dropped every time, so averaging changes nothing)."""
    g = check_grad(tensor).reshape(-1).double()
    n = g.numel()
    k = max(1, int(round(check_ratio(density) * n)))
    gen = torch.Generator().manual_seed(seed)
    norm = float(g.norm())
    top = torch.zeros_like(g)
    keep = TopK(k=k).select(g)
    top[keep] = g[keep]
    total, done, rand_err = torch.zeros_like(g), 0, []
    for d in draws:
        while done < d:
            idx = torch.randperm(n, generator=gen)[:k]
            total[idx] += g[idx] * (n / k)
            done += 1
        rand_err.append(float((total / done - g).norm()) / norm)
    return {"draws": list(draws), "Random-K (scaled)": rand_err,
            "Top-K": [float((top - g).norm()) / norm] * len(draws)}


@dataclass(frozen=True)
class TopKView:
    """Top-K of one tensor: which entries were kept and what that costs and keeps."""
    k: int
    numel: int
    kept: np.ndarray          # bool, the tensor's shape
    threshold: float          # the smallest kept |value|
    energy: float             # share of ||g||^2 kept
    cosine: float
    packet_bytes: int
    dense_bytes: int
    encoding: str

    @property
    def ratio(self) -> float:
        return self.dense_bytes / self.packet_bytes


def topk_view(tensor: torch.Tensor, k: int) -> TopKView:
    """What Top-K keeps of `tensor` for this k (one real packet)."""
    g = check_grad(tensor)
    k = check_k(k, g.numel())
    comp = TopK(k=k)
    packet = comp.compress(g)
    idx, vals = comp.sparse_parts_of(packet)
    flat = g.reshape(-1).double()
    kept = torch.zeros(g.numel(), dtype=torch.bool)
    kept[idx.cpu()] = True
    sent = torch.zeros_like(flat)
    sent[idx] = flat[idx]
    total = float(flat.pow(2).sum())
    energy = float(sent.pow(2).sum()) / total if total else 0.0
    return TopKView(k, g.numel(), kept.reshape(g.shape).numpy(), float(vals.abs().min()), energy,
                    energy ** 0.5, packet.nbytes, g.numel() * g.element_size(),
                    index_codec.ENCODINGS[packet.params[1]])
