"""Sharded data parallelism (chapter 06b's sidebar): what each GPU sends and keeps in memory
under DDP and ZeRO's three stages (FSDP).

    >>> rows = zero_stages(7e9, 64)
    >>> [r["scheme"] for r in rows][:2]
    ['DDP, fp32 all-reduce', 'DDP, bf16 all-reduce']
    >>> rows[-1]["memory per GPU (GB)"] < rows[1]["memory per GPU (GB)"] / 10   # ZeRO-3 shards it all
    True

The byte counts are ZeRO's (Rajbhandari et al. 2020): an all-reduce moves about twice the
gradient per GPU; ZeRO-1 and -2 replace it by a reduce-scatter of the gradients and an
all-gather of the updated parameters (the same volume); ZeRO-3 (FSDP's full sharding)
all-gathers the parameters again in the backward pass (1.5 times the volume). Memory with
mixed-precision Adam: 2 bytes per parameter for bf16 weights, 2 for bf16 gradients, 12 for
the fp32 master weights and Adam's two moments.
"""
from __future__ import annotations

from ..i18n import N_

WEIGHTS, GRADS, OPTIMIZER = 2, 2, 12      # bytes per parameter: bf16 weights, bf16 gradients, fp32 Adam state
SCHEMES = (N_("DDP, fp32 all-reduce"), N_("DDP, bf16 all-reduce"), N_("ZeRO-1: optimizer state sharded"),
           N_("ZeRO-2: and gradients (reduce-scatter)"), N_("ZeRO-3 / FSDP: and weights"))
COLUMNS = (N_("exchange per step"), N_("GB sent per GPU per step"), N_("memory per GPU (GB)"))
EXCHANGES = (N_("all-reduce (fp32)"), N_("all-reduce (bf16)"), N_("reduce-scatter + all-gather"),
             N_("2 all-gathers + reduce-scatter"))


def zero_stages(params: float, workers: int) -> list[dict]:
    """Per GPU and step: the collectives, the bytes sent and the memory for weights, gradients
    and optimizer state, under DDP (fp32 or bf16 gradients) and ZeRO's three stages."""
    p, n = float(params), int(workers)
    if n < 1 or p <= 0:
        raise ValueError(f"need params > 0 and workers >= 1, got {params!r} and {workers!r}")
    share = (n - 1) / n
    fp32_ddp_memory = (4 + 4 + 8) * p                   # fp32 weights and gradients, Adam's two moments
    mixed = (WEIGHTS + GRADS + OPTIMIZER) * p
    rows = [("DDP, fp32 all-reduce", "all-reduce (fp32)", 2 * share * 4 * p, fp32_ddp_memory),
            ("DDP, bf16 all-reduce", "all-reduce (bf16)", 2 * share * GRADS * p, mixed),
            ("ZeRO-1: optimizer state sharded", "reduce-scatter + all-gather", 2 * share * GRADS * p,
             (WEIGHTS + GRADS) * p + OPTIMIZER * p / n),
            ("ZeRO-2: and gradients (reduce-scatter)", "reduce-scatter + all-gather", 2 * share * GRADS * p,
             WEIGHTS * p + (GRADS + OPTIMIZER) * p / n),
            ("ZeRO-3 / FSDP: and weights", "2 all-gathers + reduce-scatter", 3 * share * GRADS * p, mixed / n)]
    return [{"scheme": s, "exchange per step": what, "GB sent per GPU per step": b / 1e9, "memory per GPU (GB)": m / 1e9}
            for s, what, b, m in rows]
