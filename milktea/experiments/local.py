"""Chapter 08's experiments: local steps against synchronous training on the tiny GPT, the
compressed weekly report, a branch that goes dark, and the calculator.

    >>> round(intellect_ratio(inner_steps=100, bits=8))      # INTELLECT-1's 400x, derived
    400

Every run of a comparison starts from the same parameters and draws the same batches
(milktea.local's simulator), so the only difference is the scheme; bytes are each worker's
real packets.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..compressors import Chain, Quantize, TopK
from ..i18n import N_, _, count
from ..local import SGD, AdamW, DataParallel, DiLoCo, LocalRun, OuterSGD, simulate
from ..local.cost import bandwidth_for, local_cost
from ..tables import word
from . import verdicts

INNER_LR = 3e-3


def intellect_ratio(inner_steps: int = 100, bits: int = 8) -> float:
    """x fewer bytes than data parallelism with fp32 gradients: H exchanges become one, and
    each value shrinks from 32 bits to `bits` (headers and scales left out)."""
    return inner_steps * 32 / bits


def ddp(lr: float = INNER_LR) -> DataParallel:
    """Synchronous data parallelism with AdamW: what DDP does."""
    return DataParallel(AdamW(lr=lr))


def diloco(inner_steps: int = 100, compressor=None, lr: float = INNER_LR, **kw) -> DiLoCo:
    """DiLoCo with AdamW inside and Nesterov SGD outside (lr 0.7, momentum 0.9)."""
    return DiLoCo(inner_steps=inner_steps, inner=AdamW(lr=lr), compressor=compressor, **kw)


def per_step(ratio: float = 0.01, lr: float = 0.3, momentum: float = 0.9) -> DataParallel:
    """A sound per-step baseline: Top-K of every gradient with DGC's momentum correction
    (each worker's velocity in its ledger, masked where it sent) and plain SGD at head
    office. Error feedback keeps its promise only for an update linear in what is sent
    (chapter 05): a ledger feeding AdamW does not. Of lr 0.3 and 1.0, tried on the tiny GPT
    from chapter 08's warm start, 0.3 trained about as far as DDP with AdamW; 1.0 stalled."""
    return DataParallel(SGD(lr=lr), TopK(ratio=ratio), momentum_correction=momentum)


def int8() -> Quantize:
    """int8 with one scale per report (as INTELLECT-1's all-reduce quantizes)."""
    return Quantize(bits=8, chunk=None)


def sparseloco(inner_steps: int = 100, ratio: float = 0.02, bits: int = 2, lr: float = INNER_LR,
               outer: OuterSGD | None = None) -> DiLoCo:
    """SparseLoCo's recipe: Top-K of the pseudo-gradient with its values in `bits` bits, and
    each worker's ledger (error feedback) keeping the rest. Head office only averages (outer
    SGD, lr 1, no momentum): the ledger already carries what outer momentum would, and both
    together overshoot (on the tiny GPT, Nesterov's 0.7 / 0.9 on top of the ledger ended 22%
    above DDP's loss where plain averaging ended 2% above)."""
    return DiLoCo(inner_steps=inner_steps, inner=AdamW(lr=lr),
                  compressor=Chain(TopK(ratio=ratio), Quantize(bits=bits, chunk=None)),
                  error_feedback=True, outer=outer or OuterSGD(lr=1.0, momentum=0.0))


def warm_start(task, steps: int, *, workers: int = 4, batch: int = 8, lr: float = INNER_LR,
               seed: int = 0) -> torch.Tensor:
    """Parameters after `steps` of synchronous training: the common start of a comparison
    (DiLoCo's paper starts its workers from a model pre-trained the usual way)."""
    run = LocalRun(task, ddp(lr), workers=workers, batch=batch, seed=seed)
    run.train(steps, eval_every=steps)
    return run.theta.clone()


HEADERS = (N_("scheme"), N_("outer steps"), N_("MB per worker"), N_("x fewer bytes than DDP"),
           N_("val loss"), N_("gap to DDP (%)"))


@dataclass
class Comparison:
    """Runs side by side; `rows` for the table, `histories` by name, the first run the reference."""
    rows: list[dict]
    histories: dict = field(default_factory=dict)

    def row(self, name: str) -> dict:
        return next(r for r in self.rows if r["scheme"] == name)

    def table(self) -> list[dict]:
        """The rows as shown: the gap to DDP in percent, headers in the reader's language."""
        return [{_(h): (100 * r["gap to DDP"] if h == "gap to DDP (%)" else r[h]) for h in HEADERS} for r in self.rows]


def compare(task, runs: dict, *, workers: int = 4, steps: int = 1000, batch: int = 8, seed: int = 1,
            start: torch.Tensor | None = None, eval_every: int | None = None, progress: bool = False,
            into: Comparison | None = None) -> Comparison:
    """Train each of `runs` ({name: scheme, or (scheme, outages)}) for the same inner steps on
    the same batches from the same start; the first is the reference (DDP). `into`: a
    comparison to add these runs to (run them a few at a time, its first run stays the reference)."""
    rows, histories = (into.rows, into.histories) if into is not None else ([], {})
    for name, spec in runs.items():
        scheme, outages = spec if isinstance(spec, tuple) else (spec, ())
        h = simulate(task, scheme, workers=workers, steps=steps, batch=batch, seed=seed, start=start,
                     outages=outages, eval_every=eval_every or max(scheme.inner_steps, steps // 10),
                     progress=progress)
        histories[name] = h
        per_worker = h.total_bytes / workers
        ref = rows[0] if rows else None
        loss = h.final("loss")
        rows.append({"scheme": name, "outer steps": h.outer_steps, "MB per worker": per_worker / 1e6,
                     "bytes per worker": per_worker,
                     "x fewer bytes than DDP": (ref["bytes per worker"] / per_worker) if ref else 1.0,
                     "val loss": loss, "gap to DDP": (loss / ref["val loss"] - 1) if ref else 0.0})
    if into is not None:
        return into
    return Comparison(rows, histories)


def sentences(cmp: Comparison) -> list[str]:
    """One line per run against the first (DDP): bytes, and the final loss in words."""
    ref = cmp.rows[0]
    return [_("**{scheme}**: {x}x fewer bytes than {ref}; final validation loss {loss}.").format(
        scheme=word(r["scheme"]), x=_ratio(r["x fewer bytes than DDP"]), ref=word(ref["scheme"]),
        loss=verdicts.relative(r["val loss"], ref["val loss"], word(ref["scheme"]))) for r in cmp.rows[1:]]


@dataclass(frozen=True)
class Target:
    """One of the benchmark's targets, checked on measured numbers."""
    text: str
    ok: bool

    def __str__(self) -> str:
        return ("[ok] " if self.ok else "[MISSED] ") + self.text


def check_bytes_and_loss(row: dict, fewer: float, gap: float) -> Target:
    """At least `fewer` x fewer bytes than DDP with a final loss at most `gap` above DDP's."""
    ok = row["x fewer bytes than DDP"] >= fewer and row["gap to DDP"] <= gap
    text = _("{scheme}: {x}x fewer bytes than DDP (target >= {fewer:g}x), final loss {loss} (target: within {gap:.0%})").format(
        scheme=word(row["scheme"]), x=_ratio(row["x fewer bytes than DDP"], fewer), fewer=fewer,
        loss=verdicts.relative(row["val loss"], row["val loss"] / (1 + row["gap to DDP"]), "DDP", limit=gap),
        gap=gap)
    return Target(text, ok)


def check_outage(row: dict, reference: dict, gap: float) -> Target:
    d = row["val loss"] / reference["val loss"] - 1
    text = _("{scheme}: final loss {loss} (target: within {gap:.0%})").format(
        scheme=word(row["scheme"]), gap=gap,
        loss=verdicts.relative(row["val loss"], reference["val loss"], word(reference["scheme"]), limit=gap))
    return Target(text, abs(d) <= gap)


def _ratio(x: float, target: float | None = None) -> str:
    """x to one decimal (none from 10,000), or to as many as it takes for the printed number
    to fall on the same side of `target` as x does (399.96, not 400.0, when 400 is missed).

    >>> _ratio(399.96094), _ratio(399.96094, 400), _ratio(1565.7, 1000)
    ('400.0', '399.96', '1,565.7')
    """
    digits = 1 if x < 1e4 else 0
    text = f"{x:,.{digits}f}"
    while target is not None and digits < 8 and (float(text.replace(",", "")) >= target) != (x >= target):
        digits += 1
        text = f"{x:,.{digits}f}"
    return text


# --- why per-step compression stops paying ----------------------------------------------------
# dense BF16 FLOP/s, scale-out link per GPU in Gbit/s (NVIDIA's data sheets; the course's sources)
# B200 servers (DGX/HGX B200) still give each GPU one 400 Gbit/s ConnectX-7 port; 800 comes with
# ConnectX-8, on B300.
HARDWARE = {"A100": (312e12, 200), "H100": (989e12, 400), "B200": (2.25e15, 400)}
LINKS = {"NVLink 4 (450 GB/s)": 450e9, "InfiniBand NDR (400 Gbit/s)": 50e9, "10 GbE": 1.25e9, "1 Gbit/s": 125e6}


def hardware_gap() -> list[dict]:
    """FLOPs a GPU can do in the time its scale-out link moves one byte."""
    return [{_("GPU"): name, _("dense BF16 TFLOP/s"): flops / 1e12, _("scale-out Gbit/s"): gbit,
             _("FLOP per byte on the link"): flops / (gbit * 125e6)} for name, (flops, gbit) in HARDWARE.items()]


def exchange_seconds(params: float = 8e9, workers: int = 64, inner_steps: int = 100, bits: int = 8) -> list[dict]:
    """One fp32 gradient's ring all-reduce on each link (bandwidth only), against DiLoCo's
    exchange of `bits`-bit reports every `inner_steps` steps, per step."""
    from ..cost import Link, ring_allreduce_time
    rows = []
    for name, bandwidth in LINKS.items():
        link = Link(bandwidth, 0.0)
        dense = ring_allreduce_time(4 * params, workers, link)
        local = ring_allreduce_time(params * bits / 8, workers, link) / inner_steps
        rows.append({_("link"): name, _("DDP s per step"): dense,
                     _("DiLoCo s per step (H={H}, {bits}-bit)").format(H=inner_steps, bits=bits): local})
    return rows


def exchange_sentence(rows: list[dict], params: float = 8e9, inner_steps: int = 100, bits: int = 8) -> str:
    """`exchange_seconds` in words: DDP over InfiniBand and over a 1 Gbit/s line, and local
    steps with `bits`-bit reports over that line, against DDP over InfiniBand."""
    ib, slow = rows[1], rows[3]
    dense, local = list(ib)[1], list(ib)[2]
    said = verdicts.relative(slow[local], ib[dense], _("DDP over InfiniBand"), digits=2)
    if said.kind == "equal":
        said = _("the same as DDP over InfiniBand")
    return _("A model of {p} parameters has {gb:.0f} GB of fp32 gradients; a ring all-reduce sends about twice that "
             "per GPU, every step. Over InfiniBand that costs **{ib:.2f} s** per step; over a 1 Gbit/s line "
             "**{slow:.0f} s**. Exchanging {bits}-bit reports once every {H} steps over the same 1 Gbit/s line costs "
             "**{local:.2f} s** per step: {said}.").format(
        p=count(params), gb=params * 4 / 1e9, ib=ib[dense], slow=slow[dense], bits=bits, H=inner_steps,
        local=slow[local], said=said)


def real_ratio(params: int, inner_steps: int = 100, compressor=None) -> dict:
    """The wire's ratio for one model: DDP's fp32 gradients over H steps against one real
    report packet of `params` values (int8 with one scale by default)."""
    from ..local.exchange import torch_kernels
    compressor = compressor or int8()
    with torch_kernels():                # numba's pool, once started, slows the torch work after it
        packet = compressor.compress(torch.randn(params, generator=torch.Generator().manual_seed(0)))
    values = params * compressor.bits // 8
    return {"params": params, "packet bytes": packet.nbytes, "values bytes": values,
            "overhead bytes": packet.nbytes - values, "ideal": intellect_ratio(inner_steps, compressor.bits),
            "real": 4 * params * inner_steps / packet.nbytes}


# --- the calculator --------------------------------------------------------------------------
def utilisation_curves(params: float, workers: int, compute_s: float, inner_steps=(1, 10, 100, 500),
                       gbits=None, latency: float = 50e-6, bits: float = 32) -> dict:
    """Compute share against link speed, one curve per H (H = 1 is data parallelism)."""
    from ..cost import Link
    gbits = list(gbits) if gbits is not None else [10 ** (k / 8) for k in range(-24, 25)]
    return {"gbit": gbits,
            "curves": {H: [local_cost(params, workers, H, Link.gbit(g, latency), compute_s, bits=bits).utilisation
                           for g in gbits] for H in inner_steps}}


def needed_gbit(utilisation: float, params: float, workers: int, compute_s: float, inner_steps: int,
                bits: float = 32, latency: float = 50e-6) -> float:
    """Gbit/s for H inner steps to compute `utilisation` of the time (inf: out of reach)."""
    b = bandwidth_for(utilisation, params, workers, inner_steps, compute_s, bits=bits, latency=latency)
    return b / 125e6 if math.isfinite(b) else math.inf
