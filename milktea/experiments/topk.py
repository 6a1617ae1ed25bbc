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
from ..tables import joined, word
from ..i18n import _
from . import verdicts
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
        return approx.select(x)[0]

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
    noise: dict[str, list[float]] = field(default_factory=dict)   # relative spread of the repeats

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
    device = pick_device(device, name="device")
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
            res.noise.setdefault(name, []).append(verdicts.noise_of(ts, floor=0.02))
            res.counts.setdefault(name, []).append(int(out.numel()))
    return res


def selection_verdict(timing: SelectionTiming) -> str:
    """The race at the largest size, in words: the fastest selector and its lead (a tie when
    the two best are within their repeats' noise), how full sort compares with the fastest,
    and the sampled threshold's count against K."""
    n = timing.sizes[-1]
    last = {name: t[-1] for name, t in timing.times.items()}
    order = sorted(last, key=last.get)
    noise = max(timing.noise[name][-1] for name in order[:2]) if len(order) > 1 else 0.0
    best = verdicts.winner({word(k): v for k, v in last.items()}, noise, fmt=lambda t: f"{t * 1e3:.3g} ms")
    device = timing.device.upper() if timing.device in ("cpu", "cuda") else timing.device
    text = _("At n = {n:,} on {device}: {best}.").format(n=n, device=device, best=best)
    if "full sort" in last and order[0] != "full sort":
        said = verdicts.compare_speed(word("full sort"), last["full sort"], word(order[0]), last[order[0]],
                                      max(timing.noise["full sort"][-1], timing.noise[order[0]][-1]))
        text += " " + _("Against the fastest: {said}.").format(said=said)
    if "sampled threshold" in timing.counts and "torch.topk" in timing.counts:
        text += " " + _("The sampled threshold returned {got:,} entries for K = {k:,}.").format(
            got=timing.counts["sampled threshold"][-1], k=timing.counts["torch.topk"][-1])
        exact = [m for m, s in zip(timing.sizes, sampled_at(timing)) if not s]
        if exact:
            text += " " + _("At the sizes where it did not sample (n = {sizes}), a sample big enough to trust would "
                            "be half the tensor or more, so it falls back to an exact selection: those points time "
                            "that path.").format(
                sizes=joined([f"{m:,}" for m in exact]))
    return verdicts.tidy(text)


def sampled_at(timing: SelectionTiming) -> list[bool]:
    """For each size of the race: did the sampled threshold really sample (else it selected exactly)?"""
    from ..compressors.select import sample_size
    return [sample_size(n, max(1, int(round(timing.density * n)))) is not None for n in timing.sizes]


def claim_sentence(rows: list[dict]) -> str:
    """The common claim "K between 0.1% and 10% cuts traffic 10-100x" against the real packets of
    `index_cost` rows (the rows nearest 10% and 0.1% density)."""
    def near(d):
        return min(rows, key=lambda row: abs(row["density"] - d))["R"]
    lo, hi = near(0.1), near(0.001)
    at_lo, at_hi = verdicts.within(lo, 10, 100), verdicts.within(hi, 10, 100)
    text = _("A common claim: keeping K between {a:.1%} and {b:.0%} of the entries, positions sent along, cuts "
             "traffic 10-100x.").format(a=0.001, b=0.1) + " "
    text += _("Measured on real packets: **{lo:.1f}x** when {b:.0%} are kept ({lo_said}) and **{hi:.0f}x** when "
              "{a:.1%} are kept ({hi_said}).").format(lo=lo, lo_said=_describe(at_lo), hi=hi, hi_said=_describe(at_hi),
                                                      a=0.001, b=0.1)
    if at_lo.kind == "below":
        text += " " + _("At 10% the positions cost bytes on top of the values.")
    if at_hi.kind == "above":
        text += " " + _("At 0.1% the packet shrinks with K while the dense gradient does not.")
    off_lo, off_hi = not 10 / 3 < lo < 300, not 10 / 3 < hi < 300   # more than 3x outside 10-100x
    if off_lo and off_hi:
        text += " " + _("So the claim is off by more than a factor of 3 at both ends.")
    elif off_lo:
        text += " " + _("So the claim is off by more than a factor of 3 where {b:.0%} are kept.").format(b=0.1)
    elif off_hi:
        text += " " + _("So the claim is off by more than a factor of 3 where {a:.1%} are kept.").format(a=0.001)
    else:
        text += " " + _("So the claim is the right order of magnitude.")
    return verdicts.tidy(text + " " + _("At very small K the header starts to count. Chapter 06 returns to index encodings "
                          "(block-sparse, the 1-byte deltas of the exercise)."))


def _describe(said) -> str:
    return {"below": _("below the claimed 10-100x"), "above": _("beyond the claimed 10-100x"),
            "inside": _("inside the claimed 10-100x")}.get(said.kind, str(said))


def _topk_indices(tensor: torch.Tensor, k: int) -> torch.Tensor:
    flat = tensor.reshape(-1)
    return TopK(k=k).select(flat)[0]


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


def randomk_shares(tensor: torch.Tensor, density: float, trials: int = 20, seed: int = 0) -> list[float]:
    """The share of ||g||^2 that Random-K keeps, one value per draw (its expectation is s)."""
    g = check_grad(tensor).reshape(-1).double()
    n = g.numel()
    k = max(1, int(round(check_ratio(density) * n)))
    gen = torch.Generator().manual_seed(seed)
    total = float(g.pow(2).sum())
    return [float(g[torch.randperm(n, generator=gen)[:k]].pow(2).sum()) / total for _draw in range(trials)]


def randomk_energy(tensor: torch.Tensor, density: float, trials: int = 20, seed: int = 0) -> float:
    """Mean share of ||g||^2 that Random-K keeps (measured over `trials` draws; about s)."""
    return float(np.mean(randomk_shares(tensor, density, trials, seed)))


def randomk_sentence(tensor: torch.Tensor, density: float, trials: int = 20, seed: int = 0) -> str:
    """Random-K's measured share of the norm against its expectation s. The standard error of
    the mean of `trials` draws is computed exactly from the tensor (sampling k of n without
    replacement), not estimated from the draws, which are skewed: most of them miss the few
    largest entries. The gap is called sampling noise only when it is within two of them."""
    shares = randomk_shares(tensor, density, trials, seed)
    mean = float(np.mean(shares))
    g = check_grad(tensor).reshape(-1).double()
    n = g.numel()
    k = max(1, int(round(check_ratio(density) * n)))
    w = g.pow(2) / g.pow(2).sum()
    var_one = k * (1 - k / n) * float((w - 1 / n).pow(2).mean()) * n / max(n - 1, 1)
    se = (var_one / len(shares)) ** 0.5
    expected = k / n
    text = _("Random-K at {s:.0%} keeps {mean:.2%} of the squared norm averaged over {n} draws; its expectation is "
             "exactly {s:.0%}, and the standard error of such an average is {se:.2%} (computed from the gradient's "
             "entries).").format(s=expected, mean=mean, n=len(shares), se=se)
    if abs(mean - expected) <= 2 * se:
        text += " " + _("The gap is within two standard errors: sampling noise. With {k} entries per draw, a handful "
                        "of large entries in or out of the sample moves the share a lot.").format(k=k)
    else:
        text += " " + _("The gap is larger than two standard errors: more draws would show whether the sampling "
                        "is skewed.")
    return verdicts.tidy(text)


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
    keep = TopK(k=k).select(g)[0]
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
