"""Training tasks: the story's quadratic toy, a digits classifier (scikit-learn's
`load_digits`, which ships offline) and a small character-level GPT (`CharGPT`: the model
and its corpus are milktea.gpt).

A task hands out plain torch pieces, so the simulator and a real DDP run train the same
thing from the same initial weights:

    >>> task = Digits(hidden=32, seed=0)
    >>> model = task.model()                 # same seed -> same initial weights, everywhere
    >>> x, y = task.shard(rank=0, workers=8) # this worker's share of the training set
    >>> task.loss(model(x), y).shape         # one loss per example
    torch.Size([180])
    >>> sorted(task.evaluate(model))         # on the held-out split
    ['accuracy', 'loss']
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_int, check_number
from .gpt import GPT, VOCAB, GPTConfig, encode, load_corpus, windows


def _check_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch dtype (torch.float32, torch.float64), got {dtype!r}")
    return dtype


def _seeded_init(seed: int, build):
    """Build a module under a fixed torch seed without touching the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


class Task:
    """What the simulator (and a DDP run) needs from a task.

    model()              a fresh nn.Module, the same initial weights for the same task
    shards(workers)      one (x, y) pair of CPU tensors per worker, covering the training set
    loss(output, y)      per-example loss, shape [batch]
    evaluate(model)      dict of held-out metrics (always "loss")
    """
    name = "task"

    def model(self) -> nn.Module:
        raise NotImplementedError

    def shards(self, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def shard(self, rank: int, workers: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The share of worker `rank` (0-based) out of `workers`."""
        workers = check_int(workers, "workers", 1)
        rank = check_int(rank, "rank", 0)
        if rank >= workers:
            raise ValueError(f"rank must be < workers ({workers}), got {rank}")
        return self.shards(workers)[rank]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        raise NotImplementedError

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model().parameters())


class QuadraticModel(nn.Module):
    """One weight vector w (zeros at start); forward(x) = w - x, one row per example."""

    def __init__(self, n_params: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n_params, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w - x


class Quadratic(Task):
    """The story's toy: loss 0.5 ||w - w*||^2, gradient w - w*, with w* ~ N(0, 1) drawn by
    numpy's legacy generator (so `seed=42` gives the story demo's numbers) and w starting at 0.

    Each worker holds examples x of w*: exactly w* when `noise` is 0, else `samples` noisy
    copies w* + noise * N(0, 1), so that workers see different gradients. float32 like a
    real gradient (so packet sizes are realistic); `dtype=torch.float64` follows numpy exactly.

    >>> task = Quadratic(1000, seed=42)
    >>> round(task.evaluate(task.model())["error"], 3)    # ||0 - w*||
    30.956
    """
    name = "quadratic"

    def __init__(self, n_params: int = 1000, seed: int = 42, *, noise: float = 0.0, samples: int = 1,
                 dtype: torch.dtype = torch.float32):
        self.n = check_int(n_params, "n_params", 1)
        self.seed = check_int(seed, "seed", 0)
        self.noise = check_number(noise, "noise", 0)
        self.samples = check_int(samples, "samples", 1)
        self.dtype = _check_dtype(dtype)
        self.optimal = torch.from_numpy(np.random.RandomState(self.seed).randn(self.n)).to(dtype)

    def model(self) -> nn.Module:
        return QuadraticModel(self.n, self.dtype)

    def shards(self, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        workers = check_int(workers, "workers", 1)
        if self.noise == 0:
            return [(self.optimal[None].clone(), torch.zeros(1)) for _ in range(workers)]
        rng = np.random.RandomState(self.seed + 1)
        out = []
        for _ in range(workers):
            eps = torch.from_numpy(rng.randn(self.samples, self.n)).to(self.dtype)
            out.append((self.optimal + self.noise * eps, torch.zeros(self.samples)))
        return out

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return 0.5 * output.pow(2).sum(-1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        w = next(model.parameters())
        err = (w - self.optimal.to(w.device, w.dtype)).norm().item()
        return {"loss": 0.5 * err * err, "error": err}

    def __repr__(self) -> str:
        extra = f", noise={self.noise}, samples={self.samples}" if self.noise else ""
        if self.dtype != torch.float32:
            extra += f", dtype={self.dtype}"
        return f"Quadratic(n_params={self.n}, seed={self.seed}{extra})"


class Targets(Task):
    """Workers whose data disagree (the shops of exercise 04.4): worker i's loss is
    0.5 ||w - t_i||^2 with its own target t_i = c + spread * z_i, where c and the z_i are
    N(0, 1) draws of numpy's generator `seed`. The average loss is smallest at the mean
    target, where no worker's own gradient w - t_i is zero: the setting in which classic
    error feedback stalls and EF21 does not (chapter 04). `evaluate` measures the distance to
    the mean target ("error"). float64 by default, so a run can go all the way down.

    >>> task = Targets(n_params=10, workers=4, seed=0)
    >>> x, _ = task.shards(4)[1]
    >>> x.shape, round(task.evaluate(task.model())["error"], 3)
    (torch.Size([1, 10]), 4.218)
    """
    name = "targets"

    def __init__(self, n_params: int = 100, workers: int = 8, *, spread: float = 3.0, seed: int = 0,
                 dtype: torch.dtype = torch.float64):
        self.n = check_int(n_params, "n_params", 1)
        self.workers = check_int(workers, "workers", 1)
        self.spread = check_number(spread, "spread", 0)
        self.seed = check_int(seed, "seed", 0)
        self.dtype = _check_dtype(dtype)
        rng = np.random.default_rng(self.seed)
        common = rng.standard_normal(self.n)
        self.targets = torch.from_numpy(common + self.spread * rng.standard_normal((self.workers, self.n))).to(dtype)
        self.optimal = self.targets.mean(0)

    def model(self) -> nn.Module:
        return QuadraticModel(self.n, self.dtype)

    def shards(self, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if check_int(workers, "workers", 1) != self.workers:
            raise ValueError(f"this task holds the targets of {self.workers} workers, asked for {workers}: "
                             f"build Targets(workers={workers})")
        return [(t[None].clone(), torch.zeros(1)) for t in self.targets]

    loss = Quadratic.loss
    evaluate = Quadratic.evaluate

    def __repr__(self) -> str:
        extra = "" if self.dtype == torch.float64 else f", dtype={self.dtype}"
        return f"Targets(n_params={self.n}, workers={self.workers}, spread={self.spread:g}, seed={self.seed}{extra})"


@lru_cache(maxsize=1)
def _load_digits():
    from milktea.digits_data import load_digits
    return load_digits()


class Digits(Task):
    """8x8 handwritten digits (1797 images, 10 classes), standardized with the training
    split's statistics. The model is an MLP 64 -> hidden -> 10 (ReLU), or softmax regression
    with `hidden=0`. `noniid=True` sorts the training set by label before sharding, so each
    worker sees only a few digits.

    >>> Digits()
    Digits(hidden=32, train=1437, test=360, seed=0, iid)
    """
    name = "digits"
    features, classes = 64, 10

    def __init__(self, hidden: int = 32, *, seed: int = 0, test_size: float = 0.2, noniid: bool = False,
                 dtype: torch.dtype = torch.float32):
        from milktea.digits_data import stratified_split
        self.hidden = check_int(hidden, "hidden", 0)
        self.seed = check_int(seed, "seed", 0)
        if not isinstance(test_size, float) or not 0 < test_size < 1:
            raise ValueError(f"test_size must be a float in (0, 1), got {test_size!r}")
        self.noniid = bool(noniid)
        self.dtype = _check_dtype(dtype)
        X, y = _load_digits()
        train, test = stratified_split(y, test_size, self.seed)    # sklearn's stratified split, same draws
        Xtr, Xte, ytr, yte = X[train], X[test], y[train], y[test]
        mean, std = Xtr.mean(0), Xtr.std(0)
        std[std == 0] = 1.0                     # pixels that are blank in every training image
        self.x_train = torch.from_numpy((Xtr - mean) / std).to(dtype)
        self.x_test = torch.from_numpy((Xte - mean) / std).to(dtype)
        self.y_train, self.y_test = torch.from_numpy(ytr), torch.from_numpy(yte)

    def model(self) -> nn.Module:
        def build():
            if self.hidden == 0:
                return nn.Linear(self.features, self.classes)
            return nn.Sequential(nn.Linear(self.features, self.hidden), nn.ReLU(),
                                 nn.Linear(self.hidden, self.classes))
        return _seeded_init(self.seed, build).to(self.dtype)

    def shards(self, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        workers = check_int(workers, "workers", 1)
        n = len(self.y_train)
        if workers > n:
            raise ValueError(f"workers must be <= {n} (one training example each at least), got {workers}")
        if self.noniid:
            order = np.argsort(self.y_train.numpy(), kind="stable")
        else:
            order = np.random.RandomState(self.seed).permutation(n)
        parts = np.array_split(order, workers)
        return [(self.x_train[p], self.y_train[p]) for p in parts]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target, reduction="none")

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "test") -> dict[str, float]:
        if split not in ("test", "train"):
            raise ValueError(f"split must be 'test' or 'train', got {split!r}")
        x, y = (self.x_test, self.y_test) if split == "test" else (self.x_train, self.y_train)
        p = next(model.parameters())
        out = model(x.to(p.device, p.dtype))
        y = y.to(p.device)
        return {"loss": F.cross_entropy(out, y).item(), "accuracy": (out.argmax(1) == y).float().mean().item()}

    def __repr__(self) -> str:
        return (f"Digits(hidden={self.hidden}, train={len(self.y_train)}, test={len(self.y_test)}, "
                f"seed={self.seed}, {'non-iid' if self.noniid else 'iid'})")


class CharGPT(Task):
    """Next-character prediction on Python source (see `load_corpus`) with `GPT`.

    Examples are non-overlapping windows of `block` characters; the training windows are
    shuffled (by `seed`) and dealt out to the workers. `loss` is each window's mean
    cross-entropy; `evaluate` reports the held-out loss (nats per character), its
    perplexity exp(loss), and the share of characters predicted exactly ("accuracy").

    >>> CharGPT().model()                  # the text's size depends on the Python version
    GPT(layers=2, heads=4, width=96, context=32, params=245,760)
    """
    name = "gpt"

    def __init__(self, *, n_layer: int = 2, n_head: int = 4, n_embd: int = 96, block: int = 32, seed: int = 0,
                 source: str = "auto", max_val_windows: int | None = 256, dtype: torch.dtype = torch.float32):
        self.cfg = GPTConfig(VOCAB, block, n_layer, n_head, n_embd)
        self.seed = check_int(seed, "seed", 0)
        self.dtype = _check_dtype(dtype)
        self.corpus = load_corpus(source)
        self.x_train, self.y_train = windows(encode(self.corpus.train), block)
        self.x_val, self.y_val = windows(encode(self.corpus.val), block)
        if max_val_windows is not None:       # evaluation in well under a second on a laptop
            check_int(max_val_windows, "max_val_windows", 1)
            self.x_val, self.y_val = self.x_val[:max_val_windows], self.y_val[:max_val_windows]

    def model(self) -> nn.Module:
        return _seeded_init(self.seed, lambda: GPT(self.cfg)).to(self.dtype)

    def shards(self, workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        workers = check_int(workers, "workers", 1)
        n = len(self.y_train)
        if workers > n:
            raise ValueError(f"workers must be <= {n} (one training window each at least), got {workers}")
        order = np.random.RandomState(self.seed).permutation(n)
        return [(self.x_train[p], self.y_train[p]) for p in np.array_split(order, workers)]

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # output [B, T, vocab], target [B, T] -> [B]: each window's mean over its characters
        per_char = F.cross_entropy(output.flatten(0, 1), target.flatten(), reduction="none")
        return per_char.view(target.shape).mean(-1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "val", chunk: int = 256) -> dict[str, float]:
        if split not in ("val", "train"):
            raise ValueError(f"split must be 'val' or 'train', got {split!r}")
        x, y = (self.x_val, self.y_val) if split == "val" else (self.x_train, self.y_train)
        dev = next(model.parameters()).device
        total = hits = 0.0
        for i in range(0, len(y), chunk):
            out = model(x[i:i + chunk].to(dev))
            yb = y[i:i + chunk].to(dev)
            total += F.cross_entropy(out.flatten(0, 1).double(), yb.flatten(), reduction="sum").item()
            hits += (out.argmax(-1) == yb).sum().item()
        loss = total / y.numel()
        perplexity = math.exp(loss) if loss < 700 else math.inf    # a diverged model's loss overflows exp
        return {"loss": loss, "perplexity": perplexity, "accuracy": hits / y.numel()}

    def __repr__(self) -> str:
        c = self.cfg
        n = sum(p.numel() for p in GPT(c).parameters())
        return (f"CharGPT({self.corpus.source}, layers={c.n_layer}, width={c.n_embd}, context={c.block}, "
                f"params={n:,}, train {len(self.y_train):,} windows, val {len(self.y_val)}, seed={self.seed})")


TASKS = ("digits", "gpt")


def make_task(name: str = "digits", *, hidden: int = 32, seed: int = 0) -> Task:
    """The task called `name`, as DDP training and `compare` build it: "digits" (the MLP,
    `hidden` wide) or "gpt" (`CharGPT` at its default size; `hidden` is the
    digits MLP's width and not used).

    >>> make_task("digits", hidden=16)
    Digits(hidden=16, train=1437, test=360, seed=0, iid)
    """
    if not isinstance(name, str):
        raise TypeError(f"task must be a str, got {type(name).__name__}")
    if name == "digits":
        return Digits(hidden=hidden, seed=seed)
    if name == "gpt":
        return CharGPT(seed=seed)
    raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
