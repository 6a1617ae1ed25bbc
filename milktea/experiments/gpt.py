"""What a transformer's gradient teaches: per-layer statistics of the character GPT
(milktea.gpt) and short side-by-side simulated runs.

    >>> from milktea.tasks import CharGPT
    >>> stats = gradient_stats(CharGPT(n_layer=1, n_embd=32), warmup_steps=2)
    >>> row = stats.row("wte.weight")        # the character embedding
    >>> row["zero rows, 1 worker"] > 0.3     # characters this worker's batch never saw
    True

Each row of `gradient_stats` is one parameter tensor: its share of the numbers, its share
of the gradient's squared norm, the share of exact zeros (and of all-zero rows) in one
worker's gradient and in the sum over workers, and for matrices the energy in the top-r
singular values beside that of a random matrix of the same shape. `kind` sums it up:
"sparse rows" (embedding rows of characters not in the batch: zero, not merely small),
"low rank" (most energy in r directions: PowerSGD's case), "tiny" (too few numbers to be
worth a packet's header and a lossy code: send dense) or "dense".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call, grad, vmap

from ..checks import check_int
from ..i18n import N_
from .tables import markdown_table

TINY = 1024
_LABELS = (N_("Top-{}%+EF, momentum corrected"), N_("Sign+EF, momentum corrected"))   # for tables.word          # the DDP hook's default min_size: smaller tensors cross dense


def _task(task):
    from ..tasks import CharGPT
    if task is None:
        return CharGPT()
    if not isinstance(task, CharGPT):
        raise TypeError(f"task must be a milktea.tasks.CharGPT, got {type(task).__name__}")
    return task


def topr_energy(m: torch.Tensor, r: int) -> float:
    """Share of ||m||^2 in its top-r singular values (1.0 for a matrix of rank <= r).

    >>> topr_energy(torch.outer(torch.ones(5), torch.arange(4.)), 1)
    1.0
    """
    s = torch.linalg.svdvals(m.double())
    total = float((s * s).sum())
    return float((s[:r] ** 2).sum()) / total if total > 0 else 0.0


def _random_energy(shape, r: int) -> float:
    g = torch.Generator().manual_seed(0)
    return topr_energy(torch.randn(*shape, generator=g), r)


def worker_batches(task, workers: int, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` windows drawn from each worker's shard: x, y of shape [workers, batch, block]."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for x, y in task.shards(workers):
        idx = torch.randperm(len(y), generator=g)[:batch]
        xs.append(x[idx])
        ys.append(y[idx])
    return torch.stack(xs), torch.stack(ys)


def worker_gradients(task, model, xb: torch.Tensor, yb: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each worker's gradient on its batch (one vmap call): {name: [workers, *shape]}."""
    params = {n: p.detach() for n, p in model.named_parameters()}

    def loss_of(p, x, y):
        return task.loss(functional_call(model, p, (x,)), y).mean()
    return vmap(grad(loss_of), in_dims=(None, 0, 0))(params, xb, yb)


def warm_up(task=None, steps: int = 20, batch: int = 32, lr: float = 0.1, momentum: float = 0.9,
            seed: int = 0):
    """The task's model after `steps` of dense SGD on minibatches of `batch` windows: a
    model part-way through training, whose gradients are typical of the run."""
    task = _task(task)
    check_int(steps, "steps", 0), check_int(batch, "batch", 1)
    model = task.model()
    params = list(model.parameters())
    velocity = [None] * len(params)
    x, y = task.x_train, task.y_train
    gen = torch.Generator().manual_seed(seed)
    for _step in range(steps):
        idx = torch.randint(len(y), (batch,), generator=gen)
        for p in params:
            p.grad = None
        task.loss(model(x[idx]), y[idx]).mean().backward()
        with torch.no_grad():           # torch.optim.SGD's update, written out (importing
            for i, p in enumerate(params):   # torch.optim costs seconds on a first call)
                if velocity[i] is None:
                    velocity[i] = p.grad.clone()
                else:
                    velocity[i].mul_(momentum).add_(p.grad)
                p.add_(velocity[i], alpha=-lr)
    return model


@dataclass
class GradientStats:
    """Per-layer statistics of one step's gradients (see the module's docstring)."""
    rows: list[dict]
    workers: int
    batch: int
    rank: int
    warmup_steps: int
    columns = ("tensor", "shape", "share of numbers", "share of norm^2", "zeros, 1 worker", "zero rows, 1 worker",
               "zeros, summed", "top-r energy", "random matrix", "kind")

    def row(self, name: str) -> dict:
        for r in self.rows:
            if r["tensor"] == name:
                return r
        raise KeyError(f"no tensor {name!r}; the model has {[r['tensor'] for r in self.rows]}")

    def of_kind(self, kind: str) -> list[dict]:
        """The rows of one kind ("sparse rows", "low rank", "tiny", "dense")."""
        return [r for r in self.rows if r["kind"] == kind]

    def by_kind(self) -> dict[str, dict]:
        """Per kind: how many tensors, their share of the numbers and of the squared norm."""
        out: dict[str, dict] = {}
        for r in self.rows:
            k = out.setdefault(r["kind"], {"tensors": 0, "share of numbers": 0.0, "share of norm^2": 0.0})
            k["tensors"] += 1
            k["share of numbers"] += r["share of numbers"]
            k["share of norm^2"] += r["share of norm^2"]
        return out

    def table(self, digits: int = 2) -> str:
        """A markdown table, one line per tensor (r = `rank`)."""
        cols = [c.replace("top-r", f"top-{self.rank}") for c in self.columns]
        rows = [{c2: r[c] for c, c2 in zip(self.columns, cols)} for r in self.rows]
        return markdown_table(rows, cols, digits=digits)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}: {v['tensors']} tensors, {v['share of numbers']:.0%} of the numbers"
                          for k, v in self.by_kind().items())
        return (f"GradientStats({len(self.rows)} tensors after {self.warmup_steps} steps, {self.workers} workers x "
                f"{self.batch} windows; {kinds})")


def gradient_stats(task=None, *, workers: int = 8, batch: int = 4, rank: int = 4, warmup_steps: int = 20,
                   seed: int = 0) -> GradientStats:
    """Per-layer statistics of the GPT's gradient after `warmup_steps` of dense SGD: each of
    `workers` workers' gradient on `batch` windows of its shard, and their sum. `rank` is
    the r of the top-r energy (PowerSGD's rank). A few seconds on 2 CPU cores (one thread)."""
    from ..threads import one_thread
    task = _task(task)
    check_int(workers, "workers", 1), check_int(batch, "batch", 1), check_int(rank, "rank", 1)
    with one_thread():
        model = warm_up(task, warmup_steps, seed=seed)
        grads = worker_gradients(task, model, *worker_batches(task, workers, batch, seed))
    total_numel = sum(g[0].numel() for g in grads.values())
    norm2 = {n: float(g[0].double().pow(2).sum()) for n, g in grads.items()}
    total_norm2 = sum(norm2.values()) or 1.0
    rows = []
    for name, g in grads.items():
        one, summed = g[0], g.sum(0)
        row = {"tensor": name, "shape": "x".join(map(str, one.shape)), "numel": one.numel(),
               "share of numbers": one.numel() / total_numel, "share of norm^2": norm2[name] / total_norm2,
               "zeros, 1 worker": float((one == 0).float().mean()), "zeros, summed": float((summed == 0).float().mean()),
               "zero rows, 1 worker": None, "top-r energy": None, "random matrix": None}
        if one.dim() == 2:
            row["zero rows, 1 worker"] = float((one == 0).all(1).float().mean())
            row["top-r energy"] = topr_energy(one, rank)
            row["random matrix"] = _random_energy(one.shape, rank)
        if row["zero rows, 1 worker"] and row["zero rows, 1 worker"] > 0.1:
            kind = "sparse rows"
        elif one.numel() < TINY:
            kind = "tiny"
        elif row["top-r energy"] is not None and row["top-r energy"] > max(0.5, 2 * row["random matrix"]):
            kind = "low rank"
        else:
            kind = "dense"
        row["kind"] = kind
        rows.append(row)
    return GradientStats(rows, workers, batch, rank, warmup_steps)


# --- side-by-side runs ---------------------------------------------------------------------
def default_schemes(ratio: float = 0.01, rank: int = 4, momentum: float = 0.9) -> list[tuple]:
    """(label, compressor, error feedback, optimizer momentum or None for the run's own) for
    dense, bf16, Top-K, int8, Sign and PowerSGD, each run as the course recommends: the biased
    compressors with the ledger and with momentum correction (the velocity before the
    compressor, DGC's first technique; the optimizer then has none), PowerSGD with its ledger
    and the optimizer's momentum (as its authors and PyTorch's hook run it)."""
    import torch

    from ..compressors import Cast, PowerSGD, Quantize, Sign
    from ..feedback import DGC, MomentumCorrected
    return [("dense", None, False, None), ("bf16", Cast(torch.bfloat16), False, None),
            (f"Top-{100 * ratio:g}%+EF, momentum corrected", DGC(ratio, momentum=momentum, approximate=False), True,
             0.0),
            ("int8", Quantize(8), False, None),
            ("Sign+EF, momentum corrected", MomentumCorrected(Sign(), momentum), True, 0.0),
            (f"PowerSGD r{rank}+EF", PowerSGD(rank), True, None)]


def side_by_side(task=None, schemes=None, *, workers: int = 4, steps: int = 30, batch: int = 4, lr: float = 0.1,
                 momentum: float = 0.9, seed: int = 0, eval_every: int | None = None, progress: bool = False) -> list[dict]:
    """Train the GPT once per scheme in the simulator, from the same weights on the same
    batches; one row per scheme: held-out loss and perplexity, compression ratio (and the
    History under "history"). No wall time: the simulator runs every worker in one process,
    and its first run pays the start-up the others do not, so its seconds time nothing a
    cluster would see. `schemes`: (label, compressor, error feedback)
    triples, or quadruples with the scheme's own optimizer momentum (None: `momentum`); by
    default `default_schemes()`."""
    from ..simulate import simulate
    task = _task(task)
    rows = []
    for entry in (schemes if schemes is not None else default_schemes(momentum=momentum)):
        label, comp, ef = entry[:3]
        own = entry[3] if len(entry) > 3 and entry[3] is not None else momentum
        h = simulate(task, comp, workers=workers, steps=steps, batch=batch, lr=lr, momentum=own,
                     error_feedback=ef, seed=seed, progress=progress, eval_every=eval_every or steps, device="cpu")
        h.scheme = label    # the plots' legend
        rows.append({"scheme": label, "val loss": h.final("loss"), "perplexity": h.final("perplexity"),
                     "accuracy": h.final("accuracy"), "R": h.ratio,
                     "diverged": h.diverged_at is not None, "history": h})
    return rows


def close_to_dense(rows: list[dict], tolerance: float = 0.2) -> list[dict]:
    """side_by_side's compressed runs that did not diverge and ended within `tolerance`
    of dense's validation loss (rows[0] is dense)."""
    dense = rows[0]["val loss"]
    return [r for r in rows[1:] if not r["diverged"] and r["val loss"] <= dense + tolerance]


def runs_table(rows: list[dict], digits: int = 3) -> str:
    """side_by_side's rows as a markdown table."""
    cols = ["scheme", "val loss", "perplexity", "accuracy", "R"]
    return markdown_table(rows, cols, digits=digits, formats={"R": "{:.1f}x", "accuracy": "{:.1%}"})


def runs_sentence(rows: list[dict], mix: dict, noise: float = 0.05) -> str:
    """side_by_side's runs in words: GPT-2 small's mix of tensors (what R = 100 on the matrices
    makes of the whole gradient), then each scheme's validation loss against dense (better,
    worse, or level within `noise`) at its ratio."""
    from ..i18n import _
    from . import verdicts
    dense = rows[0]
    text = _("At GPT-2 small's size only **{share:.3%}** of the numbers sit in tensors small enough to cross dense "
             "({n} of {total} tensors), so a compressor of R = 100 shrinks the whole gradient **{eff:.0f}x**.").format(
        share=mix["dense share"], n=mix["dense tensors"], total=mix["tensors"], eff=mix["effective ratio"])
    gaps = [verdicts.gap(float("nan") if r["diverged"] else r["val loss"], dense["val loss"], _("dense"), noise,
                         higher_is_better=False, unit="", scale=1, digits=2) for r in rows[1:]]
    from ..tables import word
    parts = [_("{scheme} {loss:.2f} at R = {r:.0f}, {gap}").format(scheme=word(r["scheme"]), loss=r["val loss"], r=r["R"],
                                                                  gap=g)
             for r, g in zip(rows[1:], gaps)]
    text += " " + _("On the one-block GPT, after the same {steps} steps, dense SGD reaches a validation loss of "
                    "{loss:.2f}; {parts} (a gap within ±{noise:g} is read as level).").format(
        steps=dense["history"].steps, loss=dense["val loss"], parts=_("; ").join(parts), noise=noise)
    if any(g.kind in ("behind", "nan") for g in gaps):
        text += " " + _("A scheme that lags here may need settings of its own (sign's step has the size of the mean "
                        "|g|, not of g, so it wants its own learning rate): compare schemes at their own best settings "
                        "before you choose.")
    return verdicts.tidy(text)
