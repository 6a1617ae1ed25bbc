"""1-bit Adam (Tang et al. 2021): Adam whose momentum crosses the wire at 1 bit per entry.

Error feedback makes a biased compressor harmless for SGD because SGD is linear in the
gradient: what the ledger holds back today is applied tomorrow, and the sum comes out
right. Adam is not linear: its variance v = E[g^2] and its step m / sqrt(v) see the
compressed gradient itself, and the ledger's correction of the sum says nothing about
the squares. So 1-bit Adam does not compress from step one:

1. warm-up: plain Adam on the dense average gradient (here: torch.optim.Adam itself);
2. then v is frozen (it changes slowly once training settles) and Adam becomes linear:
   a momentum SGD with a fixed per-entry step. Each worker updates its own momentum
   m_i = b1 m + (1 - b1) g_i, and the momenta are averaged by the compressed
   all-reduce with Sign (1 bit per entry plus a scale per chunk) and ledgers on both
   sides; every worker then steps  x -= lr / (1 - b1^t) * m / (sqrt(v_hat) + eps).

    >>> from milktea.simulate import simulate
    >>> from milktea.tasks import Digits
    >>> opt = OneBitAdam(lr=0.01, warmup=20)
    >>> h = simulate(Digits(), workers=4, steps=60, optimizer=opt, progress=False)
    >>> h.final("accuracy") > 0.85, h.bytes_per_worker[-1] < h.dense_bytes / 20
    (True, True)
"""
from __future__ import annotations

import math

import torch

from .checks import check_int, check_number
from .distributed.compressed_allreduce import CompressedAllReduce, simulate_round


class OneBitAdam:
    """1-bit Adam's settings for the simulator: `simulate(task, optimizer=OneBitAdam(...))`.

    lr, betas, eps: Adam's. warmup: steps of full-precision Adam before the variance is
    frozen and the momentum is compressed (None: never; plain Adam on an all-reduce).
    compressor: what carries the momentum (default Sign()). error_feedback: ledgers on
    both sides of the compressed all-reduce. After a run, `state` holds its `OneBitAdamState`.
    """

    def __init__(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, warmup: int | None = 100,
                 compressor=None, error_feedback: bool = True):
        from .compressors import Compressor, Sign
        self.lr = check_number(lr, "lr", 0.0)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (b1, b2), got {betas!r}")
        self.betas = tuple(check_number(b, f"betas[{i}]", 0.0, 1.0, open_high=True) for i, b in enumerate(betas))
        self.eps = check_number(eps, "eps", 0.0)
        self.warmup = None if warmup is None else check_int(warmup, "warmup", 1)   # steps of plain Adam
        self.compressor = Sign() if compressor is None else compressor
        if not isinstance(self.compressor, Compressor):
            raise TypeError(f"compressor must be a milktea Compressor, got {type(self.compressor).__name__}")
        self.error_feedback = bool(error_feedback)
        self.state: OneBitAdamState | None = None

    @property
    def name(self) -> str:
        if self.warmup is None:
            return "adam"
        return f"1bit-adam({self.compressor.name}, warmup {self.warmup})"

    def start(self, flat: torch.Tensor, workers: int) -> "OneBitAdamState":
        """A fresh run on the flat parameter vector `flat` (updated in place) with N workers."""
        self.state = OneBitAdamState(self, flat, workers)
        return self.state

    def __repr__(self) -> str:
        return (f"OneBitAdam(lr={self.lr}, betas={self.betas}, eps={self.eps}, warmup={self.warmup}, "
                f"compressor={self.compressor!r}, error_feedback={self.error_feedback})")


class OneBitAdamState:
    """One run: torch.optim.Adam for the warm-up, then frozen v and compressed momentum."""

    def __init__(self, cfg: OneBitAdam, flat: torch.Tensor, workers: int):
        self.cfg, self.flat, self.workers = cfg, flat, workers
        self.adam = torch.optim.Adam([flat], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps)
        self.ranks = [CompressedAllReduce(cfg.compressor, w, workers, error_feedback=cfg.error_feedback)
                      for w in range(workers)]
        self.t = 0
        self.m: torch.Tensor | None = None        # the momentum every worker holds (after warm-up)
        self.v: torch.Tensor | None = None        # the frozen variance
        self.denom: torch.Tensor | None = None

    @property
    def compressing(self) -> bool:
        return self.cfg.warmup is not None and self.t >= self.cfg.warmup

    def _freeze(self) -> None:
        st = self.adam.state[self.flat]
        b2 = self.cfg.betas[1]
        self.m, self.v = st["exp_avg"].clone(), st["exp_avg_sq"].clone()
        # Adam's denominator with its bias correction at the last warm-up step, from now on fixed
        self.denom = (self.v.sqrt() / math.sqrt(1 - b2 ** self.t)).add_(self.cfg.eps)
        # An entry whose gradient was exactly 0 all through warm-up (an input pixel that is
        # always blank) has v = 0: Adam never moves it, but the sign of its zero momentum
        # arrives as +-scale, and divided by eps that would throw it far away. It stays put.
        self.denom.masked_fill_(self.v == 0, math.inf)

    def step(self, G: torch.Tensor) -> list[int]:
        """One step from the workers' gradients G [workers, n]; returns each worker's bytes sent."""
        b1 = self.cfg.betas[0]
        if not self.compressing:
            self.flat.grad = self._mean(G)
            self.adam.step()
            self.flat.grad = None
            self.t += 1
            return [self.flat.numel() * self.flat.element_size()] * self.workers
        if self.m is None:
            self._freeze()
        local = G.mul(1 - b1).add_(self.m, alpha=b1)           # each worker's own momentum
        self.m, sent = self._exchange(local)
        self.t += 1
        self.flat.addcdiv_(self.m, self.denom, value=-self.cfg.lr / (1 - b1 ** self.t))
        return sent

    # the two exchanges: here all workers in one process; over torch.distributed in DistributedOneBitAdam
    def _mean(self, G):
        return G.mean(0)

    def _exchange(self, local):
        m = simulate_round(self.ranks, list(local)).to(self.flat.dtype)
        return m, [sum(p.nbytes for p in r.last[0]) for r in self.ranks]

    def __repr__(self) -> str:
        phase = "compressed momentum, v frozen" if self.compressing else "warm-up (plain Adam)"
        return f"OneBitAdamState(step {self.t}, {self.workers} workers, {phase})"


class _RankState(OneBitAdamState):
    """One rank's OneBitAdamState over torch.distributed: G is [1, n] (this rank's gradient)."""

    def __init__(self, cfg, flat, comm):
        self.comm = comm
        super().__init__(cfg, flat, 1)
        self.workers = comm.world
        self.ranks = [CompressedAllReduce(cfg.compressor, comm.rank, comm.world, error_feedback=cfg.error_feedback)]

    def _mean(self, G):
        g = G[0].div(self.comm.world)
        return self.comm.all_reduce(g, self.t)

    def _exchange(self, local):
        from .distributed.compressed_allreduce import allreduce
        m = allreduce(self.ranks[0], local[0], self.comm, self.t).to(self.flat.dtype)
        return m, [sum(p.nbytes for p in self.ranks[0].last[0])]


class DistributedOneBitAdam:
    """1-bit Adam on real ranks: call `step()` after `backward()` on a model that is NOT
    wrapped in DDP (this optimizer does the averaging: dense during warm-up, then the
    compressed all-reduce of the momentum). Every rank must start from the same weights.

        opt = DistributedOneBitAdam(model.parameters(), OneBitAdam(lr=0.01, warmup=50))
        loss.backward(); opt.step(); opt.zero_grad()

    `stats`: a milktea StatsLog of the bytes and times of every collective.
    """

    def __init__(self, params, settings: OneBitAdam, group=None, link=None):
        from .distributed.comm import Comm
        from .distributed.stats import StatsLog
        if not isinstance(settings, OneBitAdam):
            raise TypeError(f"settings must be a OneBitAdam, got {type(settings).__name__}")
        self.params = [p for p in params]
        if not self.params:
            raise ValueError("no parameters to optimise")
        self.stats = StatsLog()
        comm = Comm(group, link, self.stats)
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.state = _RankState(settings, self.flat, comm)

    @torch.no_grad()
    def step(self) -> None:
        g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])
        self.state.step(g[None])
        self.stats.close_step()
        off = 0
        for p in self.params:
            p.copy_(self.flat[off: off + p.numel()].view_as(p))
            off += p.numel()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None
