"""Chapter 09: who holds what under ZeRO 1-3 / FSDP, and what a sharded step sends, priced by
milktea.fsdp.cost and measured on real FSDP2 runs (milktea.fsdp.run) over a few gloo ranks.

    >>> rows = holdings(1e9, 4)
    >>> [round(r["total GB"], 1) for r in rows]          # DDP, ZeRO-1, ZeRO-2, ZeRO-3 (fp32, Adam)
    [16.0, 10.0, 7.0, 4.0]
    >>> round(traffic(1_000_000, 4)[-1]["x DDP"], 2)      # ZeRO-3 re-gathers the weights in backward
    1.5

The sentences and the misconceptions' verdicts are built from the numbers (`grads_only`,
`more_than_ddp`), so they say the opposite when the numbers turn.
"""
from __future__ import annotations

import threading

from ..cost import Link, allgather_time
from ..fsdp import cost
from ..i18n import N_, _
from . import verdicts
from .myth import Verdict

STAGES = {0: N_("DDP"), 1: N_("ZeRO-1 (optimizer state)"), 2: N_("ZeRO-2 (and gradients)"),
          3: N_("ZeRO-3 / FSDP (and weights)")}
COLUMNS = (N_("scheme"), N_("params GB"), N_("grads GB"), N_("optimizer GB"), N_("ledger GB"), N_("total GB"),
           N_("all-reduce GB"), N_("reduce-scatter GB"), N_("all-gathers GB"), N_("x DDP"), N_("run"),
           N_("all-reduce kB"), N_("reduce-scatter kB"), N_("all-gathers kB"), N_("total kB"), N_("x fewer than fp32"),
           N_("loss"), N_("cost model kB"), N_("model error"), N_("params kB"), N_("grads kB"), N_("optimizer kB"),
           N_("ledger kB"), N_("ledger / grads"), N_("link (Gbit/s)"), N_("fp32 step s"), N_("int8 step s"),
           N_("int8 against fp32"), N_("int8: time computing (%)"))


def holdings(params, workers: int, *, optimizer_bytes: float = 8.0, param_bytes: float = 4.0,
             grad_bytes: float = 4.0, ledger=None) -> list[dict]:
    """Memory per rank (GB) under DDP and ZeRO's three stages: milktea.fsdp.cost.memory_per_rank."""
    rows = []
    for stage, name in STAGES.items():
        m = cost.memory_per_rank(params, workers, stage=stage, param_bytes=param_bytes, grad_bytes=grad_bytes,
                                 optimizer_bytes=optimizer_bytes, ledger=ledger)
        rows.append({"scheme": _(name), "params GB": m["params"] / 1e9, "grads GB": m["grads"] / 1e9,
                     "optimizer GB": m["optimizer"] / 1e9, "ledger GB": m["ledger"] / 1e9,
                     "total GB": m["total"] / 1e9})
    return rows


def traffic(params, workers: int, *, grad_bytes: float = 4.0, weight_bytes: float = 4.0) -> list[dict]:
    """Bytes one rank sends per step (GB) by collective under DDP and ZeRO 1-3, and x DDP's."""
    ddp = cost.step_bytes(params, workers, stage=0, grad_bytes=grad_bytes)["total"]
    rows = []
    for stage, name in STAGES.items():
        b = cost.step_bytes(params, workers, stage=stage, grad_bytes=grad_bytes, weight_bytes=weight_bytes)
        rows.append({"scheme": _(name), "all-reduce GB": b.get("all_reduce", 0.0) / 1e9,
                     "reduce-scatter GB": b.get("reduce_scatter", 0.0) / 1e9,
                     "all-gathers GB": (b.get("all_gather_forward", 0.0) + b.get("all_gather_backward", 0.0)) / 1e9,
                     "x DDP": b["total"] / ddp if ddp else float("nan")})
    return rows


def holdings_sentence(rows: list[dict], workers: int) -> str:
    """DDP's memory per rank against ZeRO-3's, from `holdings`' rows."""
    ddp, z3 = rows[0]["total GB"], rows[-1]["total GB"]
    return _("On {n} ranks DDP holds {a:.3g} GB on every rank and ZeRO-3 {b:.3g} GB: {r:.3g}x less, "
             "as each rank keeps 1/{n} of everything.").format(n=workers, a=ddp, b=z3, r=ddp / z3)


# --- the ranks, warmed up while the reader reads ------------------------------------------------
def _imports() -> int:
    import torch.distributed.fsdp  # noqa: F401
    from ..fsdp import train  # noqa: F401
    return 0


class Ranks:
    """A `milktea.distributed.Pool` of `n` ranks whose start (and FSDP2's imports) runs in a
    thread: `wait()` returns the pool once it is up. The thread stays until `close()` (the
    ranks die with the thread that started them), which stops the ranks."""

    def __init__(self, n: int = 4):
        from ..distributed.pool import Pool
        self.pool, self.error = Pool(n), None
        self._up, self._done = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        try:
            self.pool.run(_imports)
        except Exception as e:          # handed to wait()
            self.error = e
        self._up.set()
        self._done.wait()
        self.pool.close()

    def wait(self):
        self._up.wait()
        if self.error is not None:
            raise self.error
        return self.pool

    def close(self) -> None:
        self._done.set()
        self._thread.join()


# --- measured runs ------------------------------------------------------------------------------
COLLECTIVE_GROUPS = {"all-reduce kB": ("all_reduce",), "reduce-scatter kB": ("reduce_scatter",),
                     "all-gathers kB": ("all_gather_forward", "all_gather_backward")}


def measure(pool, configs: dict, *, steps: int, into: dict | None = None, **options) -> dict:
    """{name: FSDPRun}: each of `configs` ({name: milktea.fsdp.run's keywords}) run on `pool`,
    from the same weights on the same batches; added to `into` when given."""
    from ..fsdp import run
    out = dict(into or {})
    for name, kw in configs.items():
        out[name] = run(workers=pool.nprocs, steps=steps, ranks=pool, **{**options, **kw})
    return out


def traffic_rows(runs: dict, ref: str) -> list[dict]:
    """Per run: kB one rank sent per step by collective, in all, x fewer than `ref`, last loss."""
    base = runs[ref].bytes()
    rows = []
    for name, r in runs.items():
        row = {"run": name}
        for col, keys in COLLECTIVE_GROUPS.items():
            row[col] = sum(r.bytes(k) for k in keys) / 1e3
        row["total kB"] = r.bytes() / 1e3
        row["x fewer than fp32"] = base / r.bytes()
        row["loss"] = r.losses[-1]
        rows.append(row)
    return rows


def model_rows(runs: dict) -> list[dict]:
    """Per run: what crossed against milktea.fsdp.cost's price for it."""
    return [{"run": name, "total kB": r.bytes() / 1e3, "cost model kB": r.priced()["total"] / 1e3,
             "model error": verdicts.model_error(r.bytes(), r.priced()["total"], tolerance=0.1)}
            for name, r in runs.items()]


def memory_rows(runs: dict) -> list[dict]:
    """Per run: the largest rank's bytes between steps (kB), and its ledger over its gradient shard."""
    rows = []
    for name, r in runs.items():
        m = max(r.memory, key=lambda x: x["total"])
        rows.append({"run": name, "params kB": m["params"] / 1e3, "grads kB": m["grads"] / 1e3,
                     "optimizer kB": m["optimizer"] / 1e3, "ledger kB": m["ledger"] / 1e3,
                     "total kB": m["total"] / 1e3, "ledger / grads": m["ledger"] / m["grads"]})
    return rows


def reduce_sentence(fp32, bf16) -> str:
    """What a bf16 reduce saved, per collective and for the whole step, from two runs."""
    rs = fp32.bytes("reduce_scatter") / bf16.bytes("reduce_scatter")
    whole = fp32.bytes() / bf16.bytes()
    return _("The bf16 reduce-scatter sent {a:.1f} kB per rank and step against fp32's {b:.1f} kB ({r:.2f}x fewer); "
             "the whole step {w:.2f}x fewer, as the all-gathers still carry fp32 weights. Loss after {n} steps: "
             "fp32 {l1:.4f}, bf16 {l2:.4f}.").format(a=bf16.bytes("reduce_scatter") / 1e3,
                                                    b=fp32.bytes("reduce_scatter") / 1e3, r=rs, w=whole,
                                                    n=len(fp32.losses), l1=fp32.losses[-1], l2=bf16.losses[-1])


def ledger_verdict(ledger: float, grads: float, noise: float = 0.1) -> verdicts.Said:
    """A ledger against the gradient shard it sits beside: "more than", "about" or "less than"
    the gradients themselves (within `noise`). kind: more, same, less, nan."""
    if verdicts.missing(ledger) or verdicts.missing(grads) or grads <= 0:
        return verdicts.failed()
    r = ledger / grads
    if r > 1 + noise:
        return verdicts.Said(_("{r:.2f}x the gradient shard beside it, more memory than the gradients "
                               "themselves").format(r=r), "more")
    if r >= 1 - noise:
        return verdicts.Said(_("{r:.2f}x the gradient shard beside it, about its size").format(r=r), "same")
    return verdicts.Said(_("{r:.2f}x the gradient shard beside it, less than the gradients themselves").format(r=r),
                         "less")


def ledger_sentence(worker_row: dict, shard_row: dict, workers: int) -> str:
    """The ledger before the reduce-scatter and HSDP's on the reduced shard, measured."""
    return _("Before the reduce-scatter, on a rank of {n}, the ledger holds {a:.0f} kB: {va} (the cost model: "
             "N - 1 = {m} shards). On HSDP's reduced shard it holds {b:.0f} kB: {vb}.").format(
        n=workers, m=workers - 1, a=worker_row["ledger kB"],
        va=ledger_verdict(worker_row["ledger kB"], worker_row["grads kB"]),
        b=shard_row["ledger kB"], vb=ledger_verdict(shard_row["ledger kB"], shard_row["grads kB"]))


def hop_sentence(run) -> str:
    """HSDP's two hops from one run: the compressed one between replicas against FSDP2's own
    all-reduce of the shard, and the reduce-scatter inside the node, left as it was."""
    a, b = run.bytes("all_reduce"), run.dense_bytes("all_reduce")
    return _("Between the replicas the compressor sent {a:.1f} kB per rank and step where FSDP2's own all-reduce "
             "of the shard sends {b:.1f} kB ({r:.0f}x fewer); inside each node the reduce-scatter stayed FSDP2's "
             "own, {c:.1f} kB.").format(a=a / 1e3, b=b / 1e3, r=b / a, c=run.bytes("reduce_scatter") / 1e3)


PLACES = (N_("FSDP over every rank, int8 (no ledger)"), N_("FSDP over every rank, Top-1% + ledger"),
          N_("HSDP: FSDP in a node, Top-1% + ledger between nodes"))


def scale_sentence(rows: list[dict], ranks: int, per_node: int) -> str:
    """The ledger before the reduce-scatter against HSDP's, from `ledger_at_scale`'s rows."""
    _int8, worker, hsdp = rows
    return _("On {n} ranks the ledger before the reduce-scatter holds {a:.3g} GB per rank, {r:.0f}x the gradient "
             "shard beside it; HSDP's ledger, {per} ranks to a node, holds {b:.3g} GB: {x:.3g}x less.").format(
        n=ranks, a=worker["ledger GB"], r=worker["ledger GB"] / worker["grads GB"], per=per_node,
        b=hsdp["ledger GB"], x=worker["ledger GB"] / hsdp["ledger GB"])


def ledger_at_scale(params, nodes: int, per_node: int, *, optimizer_bytes: float = 8.0) -> list[dict]:
    """Memory per rank (GB) for the three ways to compress a sharded step on nodes x per_node
    ranks (fp32 weights and gradients): milktea.fsdp.cost.memory_per_rank."""
    n = nodes * per_node
    cases = ((PLACES[0], n, None), (PLACES[1], n, "worker"), (PLACES[2], per_node, "shard"))
    rows = []
    for name, shards, ledger in cases:
        m = cost.memory_per_rank(params, shards, optimizer_bytes=optimizer_bytes, ledger=ledger)
        rows.append({"scheme": _(name), "params GB": m["params"] / 1e9, "grads GB": m["grads"] / 1e9,
                     "optimizer GB": m["optimizer"] / 1e9, "ledger GB": m["ledger"] / 1e9,
                     "total GB": m["total"] / 1e9})
    return rows


# --- where per-step compression stops paying ------------------------------------------------------
def step_s(params, workers: int, link: Link, compute_s: float, *, grad_bytes: float, weight_bytes: float,
           overlap: bool = True) -> float:
    """One ZeRO-3 step: compute and the reduce-scatter + two all-gathers on `link`, overlapped
    (the longer of the two, as FSDP2's prefetching allows at best) or one after the other."""
    n = workers
    comm = (allgather_time(params * grad_bytes / n, n, link)           # (N-1)(alpha + P g / N / B)
            + 2 * allgather_time(params * weight_bytes / n, n, link))
    return max(compute_s, comm) if overlap else compute_s + comm


def paying_rows(params, workers: int, compute_s: float, gbits=(1, 10, 100, 400), *, int8: float = 1.016,
                latency: float = 20e-6, noise: float = 0.05) -> list[dict]:
    """Per link: a ZeRO-3 step (overlapped) in fp32 and with int8 gradients and weights
    (qgZ + qwZ), the verdict (faster, or no measurable difference within `noise`), and the
    share of int8's step spent computing."""
    rows = []
    for g in gbits:
        link = Link.gbit(g, latency)
        a = step_s(params, workers, link, compute_s, grad_bytes=4.0, weight_bytes=4.0)
        b = step_s(params, workers, link, compute_s, grad_bytes=int8, weight_bytes=int8)
        rows.append({"link (Gbit/s)": g, "fp32 step s": a, "int8 step s": b,
                     "int8 against fp32": verdicts.speed(b, a, noise=noise), "int8: time computing (%)": 100 * compute_s / b})
    return rows


# --- the misconceptions' verdicts ------------------------------------------------------------------
def more_than_ddp(sharded: float, ddp: float, noise: float = 0.02) -> Verdict:
    """Claim: sharding sends more than DDP. `sharded`: bytes a rank sent per step for its
    reduce-scatter and the all-gather of the updated weights (ZeRO-1/2's exchange); `ddp`:
    DDP's all-reduce of the same gradient."""
    claim = _("Sharding sends more bytes than DDP")
    r = sharded / ddp
    numbers = {"sharded": sharded, "ddp": ddp, "ratio": r}
    if r > 1 + noise:
        text = _("reduce-scatter + all-gather sent {a:.1f} kB per rank against DDP's all-reduce {b:.1f} kB: "
                 "{r:.2f}x more.").format(a=sharded / 1e3, b=ddp / 1e3, r=r)
        return Verdict(claim, numbers, text, False)
    text = _("reduce-scatter + all-gather sent {a:.1f} kB per rank against DDP's all-reduce {b:.1f} kB "
             "(x{r:.3f}): an all-reduce is a reduce-scatter followed by an all-gather, the same bytes in two "
             "halves.").format(a=sharded / 1e3, b=ddp / 1e3, r=r)
    return Verdict(claim, numbers, text, True)


def grads_only(grad_ratio: float, step_ratio: float, noise: float = 0.05) -> Verdict:
    """Claim: compressing the gradients k times makes the sharded step's traffic k times smaller.
    `grad_ratio`: x fewer reduce-scatter bytes; `step_ratio`: x fewer bytes in the whole step."""
    claim = _("Compress the gradients k times and the step sends k times fewer bytes")
    numbers = {"gradients": grad_ratio, "step": step_ratio}
    if step_ratio >= grad_ratio * (1 - noise):
        text = _("the gradients crossed {g:.2f}x fewer and the whole step {s:.2f}x fewer.").format(
            g=grad_ratio, s=step_ratio)
        return Verdict(claim, numbers, text, False)
    text = _("the gradients crossed {g:.2f}x fewer, but the whole step only {s:.2f}x fewer: the all-gathers of the "
             "weights were left as they were.").format(g=grad_ratio, s=step_ratio)
    return Verdict(claim, numbers, text, True)
