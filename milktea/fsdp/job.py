"""`run`: a real FSDP2 job on a few gloo ranks, from a notebook, and what it shows.

    >>> r = run(Quantize(bits=8, chunk=256), workers=2, steps=5)     # doctest: +SKIP
    >>> r                                                            # doctest: +SKIP
    FSDPRun(2 ranks, gpt of 245,760 parameters, 5 steps, loss 4.63 -> 3.52; per step and rank:
      reduce-scatter 0.50 MB (3.94x fewer than FSDP2's own), all-gather 1.7 MB; ledger: none; ...)
    >>> r.bytes("reduce_scatter"), r.memory[0]["ledger"]             # doctest: +SKIP

Each rank is a fresh process (milktea.distributed.launch: about 10 s to start on a small
machine); the ranks shard the model, install `milktea.fsdp.compress`, train on their own
shards of the data with seeded batches, and send back their losses, traffic and memory.
Two runs with the same settings and another compressor train on the same batches from
the same weights, so their difference is what crossing the wire changed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..i18n import _
from .stats import COLLECTIVES, LABELS, StepTraffic
from .train import RunConfig, train


@dataclass
class FSDPRun:
    """What one `run` gives back.

    losses: the training loss per step (mean over the ranks); step_s: rank 0's seconds per
    step; traffic: rank 0's `StepTraffic` per step; memory: each rank's bytes between steps
    (params, grads, optimizer, ledger, total); ledger: where error feedback kept its ledger;
    eval_loss: the held-out loss after the last step (with `evaluate=True`).
    """
    config: RunConfig
    workers: int
    params: int
    losses: list
    step_s: list
    traffic: list
    memory: list
    ledger: str | None
    state: str
    eval_loss: float | None = None
    extra: dict = field(default_factory=dict)
    regathered: int | None = None

    def priced(self) -> dict:
        """The cost model's bytes per step and rank for this run (`milktea.fsdp.cost.step_bytes`,
        with the compressors' measured bytes per entry), to set beside `bytes()`."""
        from .cost import bytes_per_entry, step_bytes
        cfg = self.config
        grad_dtype = cfg.reduce_dtype if cfg.reduce_dtype is not None else None
        shards = self.workers // cfg.replicas
        if cfg.replicas > 1:
            return step_bytes(self.params, shards, grad_bytes=bytes_per_entry(None, dtype=grad_dtype),
                              weight_bytes=bytes_per_entry(cfg.weights), regathered=self.regathered,
                              replicas=cfg.replicas, replica_bytes=None if cfg.compressor is None
                              else bytes_per_entry(cfg.compressor))
        return step_bytes(self.params, shards, grad_bytes=bytes_per_entry(cfg.compressor, dtype=grad_dtype),
                          weight_bytes=bytes_per_entry(cfg.weights), regathered=self.regathered)

    def bytes(self, collective: str | None = None, skip: int = 1) -> float:
        """Mean bytes one rank sent per step by `collective` (None: all), after `skip`
        warm-up steps (the first step's traffic is the same, its times are not)."""
        rows = self._steps(skip)
        return sum(s.bytes(collective) for s in rows) / len(rows)

    def dense_bytes(self, collective: str | None = None, skip: int = 1) -> float:
        """What FSDP2's own collectives would have sent for the same calls."""
        rows = self._steps(skip)
        return sum(s.dense_bytes(collective) for s in rows) / len(rows)

    def _steps(self, skip) -> list[StepTraffic]:
        rows = self.traffic[skip:] or self.traffic
        if not rows:
            raise ValueError("this run recorded no traffic (install=False runs FSDP2 without milktea)")
        return rows

    def rows(self, skip: int = 1) -> list[dict]:
        """One row per collective: bytes per step and rank, FSDP2's own, the ratio."""
        out = []
        for k in COLLECTIVES:
            sent = self.bytes(k, skip)
            if sent or self.dense_bytes(k, skip):
                dense = self.dense_bytes(k, skip)
                out.append({"collective": LABELS[k], "bytes": sent, "dense bytes": dense,
                            "ratio": dense / sent if sent else float("nan")})
        return out

    def table(self, skip: int = 1) -> str:
        from ..tables import markdown_table
        return markdown_table(self.rows(skip))

    def __repr__(self) -> str:
        parts = []
        for r in (self.rows() if self.traffic else []):
            text = _("{collective} {mb:.3g} MB").format(collective=_(r["collective"]), mb=r["bytes"] / 1e6)
            if abs(r["ratio"] - 1) > 1e-9:
                text += _(" ({ratio:.2f}x fewer than FSDP2's own)").format(ratio=r["ratio"])
            parts.append(text)
        mem = max(m["total"] for m in self.memory) / 1e6 if self.memory and self.memory[0] else float("nan")
        return _("FSDPRun({workers} ranks, {task} of {params:,} parameters, {steps} steps, loss {a:.3g} -> {b:.3g}; "
                 "per step and rank: {traffic}; ledger: {ledger}; memory {mem:.3g} MB on the largest rank)").format(
            workers=self.workers, task=self.config.task, params=self.params, steps=len(self.losses),
            a=self.losses[0] if self.losses else float("nan"), b=self.losses[-1] if self.losses else float("nan"),
            traffic=_(", ").join(parts), ledger=self.ledger, mem=mem)


def run(compressor=None, *, workers: int = 2, weights=None, error_feedback=None, steps: int = 10,
        ranks=None, timeout: float = 300, **options) -> FSDPRun:
    """Train a small model with FSDP2 on `workers` gloo ranks (processes of this machine),
    milktea's collectives installed with `compressor`, `weights` and `error_feedback` (see
    `milktea.fsdp.compress`); returns an `FSDPRun`. `options` are `RunConfig`'s fields:
    task ("gpt" or "mlp"), layers, width, batch, lr, reduce_dtype, accumulate, replicas,
    link_gbit, evaluate, seed, ...

    ranks: a `milktea.distributed.Pool` of `workers` ranks kept up between runs (a notebook
    that compares several runs starts its processes once); None starts fresh ones."""
    from ..distributed.launch import launch
    cfg = RunConfig(compressor=compressor, weights=weights, error_feedback=error_feedback, steps=steps, **options)
    if ranks is None:
        every = launch(train, workers, args=(cfg,), results="all", timeout=timeout)
    else:
        if ranks.nprocs != workers:
            raise ValueError(f"the pool has {ranks.nprocs} ranks, the run asks for workers={workers}")
        every = ranks.run(train, args=(cfg,), results="all", timeout=timeout)
    first = every[0]
    return FSDPRun(cfg, workers, first["params"], first["losses"], first["step_s"], first["traffic"],
                   [r["memory"] for r in every], first["ledger"], first["state"], first.get("eval_loss"),
                   {"ranks": every}, first["regathered"])
