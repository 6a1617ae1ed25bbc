"""PowerSGD, taught step by step (chapter 06b): spectrum, rank sweep, linearity, warm start, cost.

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

_LABELS = (N_("PowerSGD r{} + ledger"), N_("PowerSGD r{}, no ledger"))   # chapter 06b's run names, for tables.word

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


#: bytes a fused PowerSGD step moves per gradient element on a memory-bound device: X = M + e
#: (read 8, write 4), P = X Q and Q = X^T P (read X twice), e = X - P Q^T (read 4, write 4)
POWERSGD_BYTES_PER_ELEMENT = 28


def step_cost(shapes, workers: int, link: cost.Link, rank: int, repeats: int = 3, gpu_gbps: float = 2000.0,
              sample: tuple = (1024, 4096)) -> dict:
    """Price one PowerSGD exchange against a dense ring all-reduce of the same matrices.

    PowerSGD issues two all-reduces one after the other (P, then Q: Q needs the summed,
    orthonormalised P), so it pays the ring's latency 2(N-1)alpha twice. Around them every
    worker computes: the gradient plus its ledger, X = M + e; the products P = X Q and
    Q = X^T P (m·n·r each); the orthonormalisation of P (a QR of each m x r matrix); and the
    new ledger e = X - P Q^T. On this machine the orthonormalisations are timed as they are,
    and the rest on one `sample`-shaped matrix (warm, the fastest of `repeats`), scaled by
    the elements (every part is linear in m·n at a fixed rank). On a GPU, priced at `gpu_gbps`
    GB/s of memory bandwidth (POWERSGD_BYTES_PER_ELEMENT per element, an assumption: the
    products at rank 4 are memory-bound there).
    """
    shapes = [tuple(s) for s in shapes]
    dense_bytes = sum(4 * m * n for m, n in shapes)
    p_bytes = sum(4 * m * min(rank, m, n) for m, n in shapes)
    q_bytes = sum(4 * n * min(rank, m, n) for m, n in shapes)
    t_p = cost.ring_allreduce_time(p_bytes, workers, link)
    t_q = cost.ring_allreduce_time(q_bytes, workers, link)
    ps = [torch.randn(m, min(rank, m, n)) for m, n in shapes]
    ortho = min(time_it(lambda: [orthonormalize(p) for p in ps], repeat=repeats, warmup=1))
    g = torch.Generator().manual_seed(0)
    mat, led = torch.randn(*sample, generator=g), torch.randn(*sample, generator=g)
    q0 = torch.randn(sample[1], rank, generator=g)

    def arithmetic():
        x = mat + led
        p = x @ q0                      # (its orthonormalisation is timed above)
        q = x.t() @ p
        torch.sub(x, p @ q.t(), out=led)
    sample_s = min(time_it(arithmetic, repeat=repeats, warmup=1))
    elements = sum(m * n for m, n in shapes)
    cpu = sample_s * elements / (sample[0] * sample[1])
    gpu = POWERSGD_BYTES_PER_ELEMENT * elements / (gpu_gbps * 1e9)
    return {"dense bytes": dense_bytes, "PowerSGD bytes": p_bytes + q_bytes,
            "R": dense_bytes / (p_bytes + q_bytes), "dense all-reduce s": cost.ring_allreduce_time(dense_bytes, workers, link),
            "all-reduce of P s": t_p, "all-reduce of Q s": t_q, "orthonormalise s (this machine)": ortho,
            "products and ledger s (this machine)": cpu, "products and ledger s (GPU, assumed)": gpu,
            "gpu GB/s": gpu_gbps, "PowerSGD total s": t_p + t_q + ortho + cpu, "PowerSGD total s (GPU)": t_p + t_q + gpu}


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
    """`step_cost` in words: dense against PowerSGD's two all-reduces and its arithmetic (the
    products, the ledger, the orthonormalisation), on this machine's CPU and at a GPU's
    assumed memory bandwidth, each total said against dense."""
    from ..i18n import _
    from . import verdicts
    links = pc["all-reduce of P s"] + pc["all-reduce of Q s"]
    text = _("Dense: {gb:.1f} GB, **{dense:.2f} s** per all-reduce. PowerSGD r4: R = {r:.0f}, two all-reduces of "
             "{p:.1f} ms and {q:.1f} ms (each with {lat:.1f} ms of ring latency). Around them every worker adds its "
             "ledger to the gradient, computes the two products $XQ$ and $X^\\top P$ and the new ledger "
             "$X - PQ^\\top$ (each pass over all {n} matrices), and orthonormalises $P$.").format(
        gb=pc["dense bytes"] / 1e9, dense=pc["dense all-reduce s"], r=pc["R"], p=1e3 * pc["all-reduce of P s"],
        q=1e3 * pc["all-reduce of Q s"], lat=1e3 * 2 * (workers - 1) * link.latency, n=matrices)
    text += " " + _("On this machine's CPU the products and the ledger take {cpu:.1f} s (timed on one matrix and "
                    "scaled by the elements) and the orthonormalisation {o:.0f} ms: **{total:.2f} s** in all, "
                    "{said}.").format(
        cpu=pc["products and ledger s (this machine)"], o=1e3 * pc["orthonormalise s (this machine)"],
        total=pc["PowerSGD total s"],
        said=verdicts.compare_speed(_("PowerSGD"), pc["PowerSGD total s"], _("dense"), pc["dense all-reduce s"]))
    text += " " + _("A GPU that streamed them at an assumed {gbps:g} GB/s of memory bandwidth would take about "
                    "{gpu:.0f} ms (an assumption, not a measurement: no GPU timed it here): **{total:.2f} s** with the "
                    "link, {said}.").format(
        gbps=pc["gpu GB/s"], gpu=1e3 * pc["products and ledger s (GPU, assumed)"], total=pc["PowerSGD total s (GPU)"],
        said=verdicts.compare_speed(_("PowerSGD"), pc["PowerSGD total s (GPU)"], _("dense"), pc["dense all-reduce s"]))
    text += " " + _("The arithmetic the bytes do not show is the price: {share:.0%} of PowerSGD's step on this CPU. "
                    "The same rank on a smaller layer saves less: R = mn / (r(m+n)) depends on the layer's shape, so "
                    "price it with the model's real layers.").format(
        share=(pc["PowerSGD total s"] - links) / pc["PowerSGD total s"])
    return verdicts.tidy(text)
