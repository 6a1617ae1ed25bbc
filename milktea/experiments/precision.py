"""What large runs actually send per step: the number format of the gradient reduction, and
of the parameters' all-gather under sharding (chapter 05's last section).

The bytes per GPU follow the ring collectives of chapter 01: an all-reduce sends 2(N-1)/N
of the message, a reduce-scatter or an all-gather (N-1)/N. DDP all-reduces the gradients;
ZeRO-3 / FSDP's full sharding reduce-scatters them and all-gathers the parameters twice
(forward and backward). The reduction may run in fp32 even for bf16 gradients (Llama 3
reports an fp32 reduce-scatter; FSDP's `MixedPrecisionPolicy(reduce_dtype=torch.float32)`);
NCCL 2.24 added FP8 reductions, and FSDP2 can all-gather float8 weights.

    >>> rows = wire_formats(8e9, 64)
    >>> [round(r["GB sent per GPU per step"], 1) for r in rows][:3]
    [63.0, 31.5, 15.8]
"""
from __future__ import annotations

from ..checks import check_int, check_number
from ..cost import ring_allreduce_bytes
from ..i18n import N_, _

# (the run, what crosses the wire, [(collective, bytes per parameter, how many per step)])
FORMATS = (
    (N_("DDP, fp32 all-reduce"), N_("fp32 gradients"), [("all-reduce", 4, 1)]),
    (N_("DDP, bf16 all-reduce"), N_("bf16 gradients"), [("all-reduce", 2, 1)]),
    (N_("DDP, FP8 all-reduce"), N_("FP8 gradients, one scale per tensor"), [("all-reduce", 1, 1)]),
    (N_("FSDP, fp32 reduce"), N_("bf16 parameters (twice), fp32 gradients"), [("all-gather", 2, 2), ("reduce-scatter", 4, 1)]),
    (N_("FSDP, bf16 reduce"), N_("bf16 parameters (twice), bf16 gradients"), [("all-gather", 2, 2), ("reduce-scatter", 2, 1)]),
    (N_("FSDP, float8 all-gather"), N_("FP8 parameters (twice), bf16 gradients"), [("all-gather", 1, 2), ("reduce-scatter", 2, 1)]),
)
COLUMNS = (N_("run"), N_("on the wire"), N_("GB sent per GPU per step"), N_("against DDP in fp32"))


def wire_formats(params: float, workers: int) -> list[dict]:
    """GB each GPU sends per step under each format of FORMATS, for a model of `params`
    parameters on `workers` GPUs (ring collectives, bandwidth term only)."""
    p = check_number(params, "params", 0, open_low=True)
    n = check_int(workers, "workers", 2)
    rows = []
    for run, wire, parts in FORMATS:
        sent = 0.0
        for collective, nbytes, times in parts:
            whole = ring_allreduce_bytes(nbytes * p, n)             # 2(N-1)/N of the message
            sent += times * (whole if collective == "all-reduce" else whole / 2)
        rows.append({"run": run, "on the wire": wire, "GB sent per GPU per step": sent / 1e9})
    ref = rows[0]["GB sent per GPU per step"]
    for r in rows:
        r["against DDP in fp32"] = r["GB sent per GPU per step"] / ref
    return rows


def shown(rows: list[dict]) -> list[dict]:
    """The rows with their names and headers in the reader's language."""
    return [{_(k): (_(v) if k in ("run", "on the wire") else v) for k, v in r.items()} for r in rows]
