"""PowerSGD, taught step by step (chapter 06): spectrum, rank sweep, linearity, warm start, cost.

    >>> from milktea.experiments.gradients import layer_gradients
    >>> m = layer_gradients(hidden=64)["0.weight"]
    >>> rows = rank_sweep(m, ranks=(1, 4))
    >>> rows[0]["rank"], rows[1]["relative error"] < rows[0]["relative error"]
    (1, True)
"""
from __future__ import annotations

import torch

from .. import cost
from ..compressors import PowerSGD, TopK, orthonormalize
from ..i18n import N_

from ..timing import time_it

_LABELS = (N_("PowerSGD r{} + ledger"), N_("PowerSGD r{}, no ledger"))   # chapter 06's run names, for tables.word

# linearity()'s keys as a reader sees them (tables.pairs)
LINEARITY_KEYS = (N_("workers"), N_("Top-K: positions kept by every worker"), N_("Top-K: positions per worker"),
                  N_("Top-K: |sum of packets - TopK(sum)| / |TopK(sum)|"))


def _matrix(m) -> torch.Tensor:
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(m).__name__}")
    if m.dim() < 2:
        raise ValueError(f"PowerSGD needs a matrix (a weight's gradient), got shape {tuple(m.shape)}")
    return PowerSGD.as_matrix(m)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def spectrum(m: torch.Tensor) -> dict:
    """Singular values of the gradient matrix and the share of ||M||^2 the top r of them hold."""
    s = torch.linalg.svdvals(_matrix(m).double())
    energy = (s ** 2).cumsum(0) / (s ** 2).sum()
    return {"singular values": s.float(), "energy": energy.float(), "shape": tuple(_matrix(m).shape)}


def best_rank_error(m: torch.Tensor, rank: int) -> float:
    """Relative error of the best rank-r approximation (Eckart-Young: the truncated SVD)."""
    s = torch.linalg.svdvals(_matrix(m).double())
    return float((s[rank:] ** 2).sum().sqrt() / (s ** 2).sum().sqrt())


def rank_sweep(m: torch.Tensor, ranks=(1, 2, 4, 8, 16, 32), calls: int = 8) -> list[dict]:
    """For each rank: the real packet's R, the relative error of one power step from a random
    start, after `calls` warm-started steps on the same gradient, and the SVD optimum."""
    mat = _matrix(m)
    rows = []
    for r in ranks:
        cold = PowerSGD(rank=r, warm_start=False)
        packet = cold.compress(mat)
        one = _rel(cold.decompress(packet), mat)
        warm = PowerSGD(rank=r, warm_start=True)
        for _call in range(calls):
            approx = warm.decompress(warm.compress(mat))
        rows.append({"rank": r, "R": packet.ratio, "relative error": one,
                     f"after {calls} warm steps": _rel(approx, mat), "best possible (SVD)": best_rank_error(mat, r)})
    return rows


def warm_start_trace(grads: list, rank: int = 2) -> dict:
    """Relative error of each step's rank-r approximation over a sequence of gradients,
    with Q reused from the previous step (warm start) and with a fresh random Q each time."""
    out = {"warm start": [], "cold start": [], "best possible (SVD)": []}
    warm, cold = PowerSGD(rank=rank, warm_start=True), PowerSGD(rank=rank, warm_start=False)
    for g in grads:
        mat = _matrix(g)
        out["warm start"].append(_rel(warm.decompress(warm.compress(mat)), mat))
        out["cold start"].append(_rel(cold.decompress(cold.compress(mat)), mat))
        out["best possible (SVD)"].append(best_rank_error(mat, rank))
    return out


def training_gradients(hidden: int = 128, steps: int = 12, batch: int = 64, seed: int = 0,
                       layer: str = "0.weight") -> list[torch.Tensor]:
    """One layer's minibatch gradient at each of `steps` consecutive SGD steps (lr 0.1)."""
    from ..tasks import Digits
    task = Digits(hidden=hidden, seed=seed)
    model = task.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    if layer not in params:
        raise ValueError(f"unknown layer {layer!r}; choose from {list(params)}")
    out = []
    for _step in range(steps):
        idx = torch.randint(len(task.y_train), (batch,), generator=gen)
        opt.zero_grad()
        task.loss(model(task.x_train[idx]), task.y_train[idx]).mean().backward()
        out.append(params[layer].grad.detach().clone())
        opt.step()
    return out


def linearity(grads: list, rank: int = 2, ratio: float = 0.01) -> dict:
    """Why P and Q can be all-reduced and Top-K packets cannot.

    With a Q shared by all workers, P_i = M_i Q is linear in M_i: the sum of the workers' P
    equals (sum of M_i) Q, so summing P on the wire loses nothing. Top-K is not linear: the
    workers keep different positions, and the sum of their packets is not Top-K of the sum.
    """
    mats = [_matrix(g) for g in grads]
    q = torch.randn(mats[0].shape[1], rank, generator=torch.Generator().manual_seed(0))
    total = sum(mats)
    p_sum = sum(m @ q for m in mats)
    top = TopK(ratio=ratio)
    positions = [set(top.sparse_parts_of(top.compress(m))[0].tolist()) for m in mats]
    shared = set.intersection(*positions)
    packets_sum = sum(top.decompress(top.compress(m)) for m in mats)
    return {"workers": len(mats),
            "P: |sum_i M_i Q - (sum_i M_i) Q| / |.|": _rel(p_sum, total @ q),
            "Top-K: positions kept by every worker": len(shared),
            "Top-K: positions per worker": len(positions[0]),
            "Top-K: |sum of packets - TopK(sum)| / |TopK(sum)|": _rel(packets_sum.reshape(total.shape),
                                                                    top.decompress(top.compress(total)).reshape(total.shape))}


def power_step(m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One PowerSGD step on one worker's view (no communication): P = M Q, orthonormalise P,
    Q = M^T P. In a cluster P is all-reduced before orthonormalising, and Q after."""
    p = orthonormalize(_matrix(m) @ q)
    return p, _matrix(m).t() @ p


def step_cost(shapes, workers: int, link: cost.Link, rank: int, repeats: int = 5) -> dict:
    """Price one PowerSGD exchange against a dense ring all-reduce of the same matrices.

    PowerSGD issues two all-reduces one after the other (P, then Q: Q needs the summed,
    orthonormalised P), so it pays the ring's latency 2(N-1)alpha twice; the orthonormalisation
    (a QR of each m x r matrix P) is timed on this machine.
    """
    shapes = [tuple(s) for s in shapes]
    dense_bytes = sum(4 * m * n for m, n in shapes)
    p_bytes = sum(4 * m * min(rank, m, n) for m, n in shapes)
    q_bytes = sum(4 * n * min(rank, m, n) for m, n in shapes)
    t_p = cost.ring_allreduce_time(p_bytes, workers, link)
    t_q = cost.ring_allreduce_time(q_bytes, workers, link)
    ps = [torch.randn(m, min(rank, m, n)) for m, n in shapes]
    best = min(time_it(lambda: [orthonormalize(p) for p in ps], repeat=repeats, warmup=0))
    return {"dense bytes": dense_bytes, "PowerSGD bytes": p_bytes + q_bytes,
            "R": dense_bytes / (p_bytes + q_bytes), "dense all-reduce s": cost.ring_allreduce_time(dense_bytes, workers, link),
            "all-reduce of P s": t_p, "all-reduce of Q s": t_q, "orthonormalise s (this machine)": best,
            "PowerSGD total s": t_p + t_q + best}


def ledger_sentence(runs: dict, noise_points: float = 1.0) -> str:
    """The PowerSGD runs ("dense", "PowerSGD r2 + ledger", "PowerSGD r2, no ledger") in words:
    each against dense (ahead, behind or level within `noise_points`) and what the ledger did."""
    from ..i18n import _
    from . import verdicts
    acc = {k: h.final("accuracy") for k, h in runs.items()}
    noise = noise_points / 100
    text = _("After {steps} steps the run with the ledger ends {ef}, the run without it {plain}; the ledger {said} "
             "(one seed: a gap within ±{n:g} points is read as level).").format(steps=runs["dense"].config["steps"],
        ef=verdicts.gap(acc["PowerSGD r2 + ledger"], acc["dense"], _("dense"), noise),
        plain=verdicts.gap(acc["PowerSGD r2, no ledger"], acc["dense"], _("dense"), noise),
        said=verdicts.effect(acc["PowerSGD r2 + ledger"], acc["PowerSGD r2, no ledger"], noise), n=noise_points)
    return verdicts.tidy(text)


def step_cost_sentence(pc: dict, matrices: int, workers: int, link: cost.Link) -> str:
    """`step_cost` in words: dense against PowerSGD's two all-reduces and the orthonormalisation
    timed on this machine's CPU, with the latter's share said from the numbers, and the GPU
    speed of the orthonormalisation named as not measured."""
    from ..i18n import _
    from . import verdicts
    ortho, links = pc["orthonormalise s (this machine)"], pc["all-reduce of P s"] + pc["all-reduce of Q s"]
    text = _("Dense: {gb:.1f} GB, **{dense:.2f} s** per all-reduce. PowerSGD r4: R = {r:.0f}, two all-reduces of "
             "{p:.1f} ms and {q:.1f} ms (each with {lat:.1f} ms of ring latency), plus {o:.0f} ms to orthonormalise "
             "{n} matrices on this machine's CPU: **{total:.2f} s**.").format(
        gb=pc["dense bytes"] / 1e9, dense=pc["dense all-reduce s"], r=pc["R"], p=1e3 * pc["all-reduce of P s"],
        q=1e3 * pc["all-reduce of Q s"], lat=1e3 * 2 * (workers - 1) * link.latency, o=1e3 * ortho, n=matrices,
        total=pc["PowerSGD total s"])
    text += " " + _("On this CPU the orthonormalisation takes {r:.2g} times as long as the two all-reduces on the "
                    "link.").format(r=ortho / links)
    text += " " + _("Its arithmetic is small (about m·r² per matrix, against m·n·r for each product), but on a CPU it "
                    "runs one small matrix after another; on a GPU, batched, it would take a fraction of this. That is "
                    "an expectation, not a measurement: no GPU timed it here. The same rank on a smaller layer saves "
                    "less: R = mn / (r(m+n)) depends on the layer's shape, so price it with the model's real layers.")
    return verdicts.tidy(text)
