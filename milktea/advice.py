"""Which way to send the gradient on *your* cluster: a decision guide from your numbers.

    >>> free = {name: 0.0 for name in CODEC_NAMES}     # an ideal codec; "measure" times yours
    >>> advise(params=25e6, workers=8, gbit=100, compute_s=0.2, codec_ns=free).choice
    'dense'
    >>> advise(params=1.3e9, workers=16, gbit=10, compute_s=0.5, codec_ns=free).choice
    'powersgd'

Every scheme is priced with the alpha-beta cost model (milktea.cost): its real wire
ratio, the collective it can use (summable packets all-reduce; sparse and quantized
packets must be all-gathered, which grows with the number of workers), and the time its
codec adds per step. The guide then picks the *simplest* scheme within `tolerance` of the
fastest, because a simpler scheme has fewer ways to hurt convergence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import cost
from .checks import check_int, check_number
from .i18n import N_, _
from .tables import markdown_table
from .timing import codec_seconds, median, time_it


@dataclass(frozen=True)
class Option:
    """One way to send the gradient.

    ratio: fp32 bytes / wire bytes. collective: "allreduce" or "allgather".
    codec_ns: nanoseconds of compress + decode per parameter (0: free).
    complexity: 0 (nothing to tune) .. 4 (biased, needs error feedback and care).
    needs: what it takes to converge like dense SGD.
    """
    name: str
    ratio: float
    collective: str
    codec_ns: float
    complexity: int
    needs: str


CODEC_NAMES = ("bf16", "powersgd", "int8", "topk1%+EF", "topk1%+int8+EF", "sign+EF")


def transformer_shapes(params: float, aspect: int = 128) -> list[tuple[int, int]]:
    """Weight-matrix shapes of a standard transformer with about `params` parameters: L blocks
    of width d (four d x d attention matrices, a d x 4d and a 4d x d MLP: 12 d^2 per block),
    with d = `aspect` x L (the depth-to-width ratio of common model families), d a multiple of 64.
    A stand-in when the real model's shapes are not given.

    >>> shapes = transformer_shapes(1.3e9)
    >>> len(shapes) // 6, shapes[0]
    (19, (2368, 2368))
    """
    params = check_number(params, "params", 0, open_low=True)
    layers = max(1, round((params / (12 * aspect ** 2)) ** (1 / 3)))
    d = max(64, 64 * round(math.sqrt(params / (12 * layers)) / 64))
    return [(d, d)] * 4 * layers + [(d, 4 * d), (4 * d, d)] * layers


def powersgd_ratio(shapes, rank: int = 4) -> float:
    """fp32 bytes / PowerSGD bytes for these weight matrices: sum(m n) / sum(r (m + n)),
    a matrix too small to gain (r (m + n) >= m n) sent dense.

    >>> powersgd_ratio([(4096, 4096)], rank=4)
    512.0
    """
    dense = sent = 0
    for shape in shapes:
        if len(shape) < 2:
            dense, sent = dense + math.prod(shape), sent + math.prod(shape)
            continue
        m, n = shape[0], math.prod(shape[1:])
        r = min(rank, m, n)
        dense += m * n
        sent += min(m * n, r * (m + n))
    if dense == 0:
        raise ValueError("no weight shapes given")
    return dense / sent


#: The menu: each option is one of the library's schemes (its codec's record says its bytes
#: and its protocol the collective), how hard it is to get right, and what it needs.
MENU = {
    "dense": ("dense", 0, N_("nothing")),
    "bf16": ("bf16", 1, N_("one line; compare the loss curve with fp32 (7 mantissa bits, rounded again at every step of the sum)")),
    "powersgd": ("powersgd", 3, N_("error feedback, dense warm-up steps (PyTorch's start_powerSGD_iter: 1000 by default, about a tenth "
                                   "of training advised), a rank tuned to the model")),
    "int8": ("int8", 2, N_("a chunk size (e.g. 1024) for the scales")),
    "topk1%+EF": ("topk", 4, N_("error feedback, momentum correction, warm-up, dense biases and norms")),
    "topk1%+int8+EF": ("topk-int8", 4, N_("error feedback, momentum correction, warm-up, dense biases and norms")),
    "sign+EF": ("sign", 4, N_("error feedback (without it sign SGD stalls), momentum correction, a tuned learning rate")),
}


def scheme_wire(scheme: str, layer_shapes, rank: int = 4, ratio: float = 0.01) -> tuple[float, str]:
    """(fp32 bytes / wire bytes, the collective) of a library scheme on these weight shapes:
    the bytes its codec's record says a packet of each shape costs (`Codec.cost`), the
    collective its protocol uses (`milktea.distributed.protocols.collective_for`).

    >>> [(round(r, 2), c) for r, c in (scheme_wire(s, [(4096, 4096)]) for s in ("int8", "topk", "powersgd"))]
    [(3.98, 'allgather'), (80.0, 'allgather'), (512.0, 'allreduce')]
    """
    import torch
    from .compressors.codec import library
    from .distributed.protocols import collective_for
    record = next((r for r in library() if scheme in r.schemes), None)
    if record is None:
        raise ValueError(f"no library codec has a scheme {scheme!r}")
    compressor = record.schemes[scheme][1](ratio, rank)
    shapes = [tuple(s) for s in layer_shapes]
    sent = sum(record.cost(compressor, shape, torch.float32) for shape in shapes)
    return 4 * sum(math.prod(shape) for shape in shapes) / sent, collective_for(compressor)


def options(codec_ns: dict, layer_shapes=((4096, 4096),), powersgd_rank: int = 4) -> list[Option]:
    """The menu (MENU), with wire ratios from milktea's packets on the model's weight shapes
    (`scheme_wire`). `codec_ns`: the codec cost per parameter in nanoseconds for every name
    in CODEC_NAMES (see `measure_codecs`)."""
    if not isinstance(codec_ns, dict) or set(CODEC_NAMES) - set(codec_ns):
        raise ValueError(f"codec_ns must give nanoseconds per parameter for each of {CODEC_NAMES} "
                         f"(measure_codecs() measures them here), got {codec_ns!r}")
    ns = dict(codec_ns, dense=0.0)
    out = []
    for name, (scheme, complexity, needs) in MENU.items():
        ratio, collective = scheme_wire(scheme, layer_shapes, powersgd_rank)
        out.append(Option(name, ratio, collective, ns[name], complexity, needs))
    return out


@dataclass
class Advice:
    """The priced menu and the choice, with the reasons in words."""
    rows: list[dict]
    choice: str
    reasons: list[str]
    dense_comm_share: float
    ceiling: float                    # best possible speedup: (compute + dense comm) / compute
    situation: dict = field(default_factory=dict)

    def table(self) -> list[dict]:
        return self.rows

    def _repr_markdown_(self) -> str:
        head = _("**Choice: `{choice}`**\n\n").format(choice=self.choice) + "\n".join(f"- {r}" for r in self.reasons)
        return head + "\n\n" + markdown_table(self.rows)

    def __repr__(self) -> str:
        return f"Advice(choice={self.choice!r}, dense comm share {self.dense_comm_share:.0%}, " \
               f"ceiling {self.ceiling:.2f}x)"


def advise(params: float, workers: int, gbit: float, compute_s: float, *, latency_us: float = 50.0,
           overlap: bool = True, buckets: int = 8, layer_shapes=None, powersgd_rank: int = 4,
           codec_ns: dict | str = "measure", tolerance: float = 0.1, small_share: float = 0.1,
           local_steps: int | None = None) -> Advice:
    """Price every option for your cluster and pick one.

    params: model parameters. workers: data-parallel ranks. gbit: each rank's link, Gbit/s.
    compute_s: forward + backward seconds per step. codec_ns: nanoseconds per parameter of
    each codec ("measure": time them on this machine once). overlap/buckets: DDP-style bucketed
    overlap (cost.iteration_time). tolerance: take the simplest option within this share of
    the fastest. small_share: if dense communication is below this share of the step, do
    not compress at all. layer_shapes: the model's parameter shapes, e.g.
    `[p.shape for p in model.parameters()]`, for PowerSGD's ratio (default: a standard
    transformer of `params` parameters, `transformer_shapes`).
    local_steps: also price local steps (DiLoCo, milktea.local) exchanging every H =
    `local_steps` steps, fp32 and int8 reports through a ring all-reduce: the exchange is
    paid once per H steps and not overlapped, and the guide says whether it beats the best
    per-step scheme. Local steps change the optimisation itself (chapter 08), so they count
    as complex as PowerSGD.

    >>> free = {name: 0.0 for name in CODEC_NAMES}
    >>> advise(1e9, 8, 0.1, 0.5, codec_ns=free, local_steps=100).reasons[-1]
    'local H=100 int8 does not pay here: 1.91 s per step against 1.56 s for powersgd (1.22x slower)'
    >>> advise(1e9, 8, 0.1, 0.5, codec_ns=free, local_steps=500).choice
    'local H=500 int8'
    """
    params, gbit = check_number(params, "params", 0, open_low=True), check_number(gbit, "gbit", 0, open_low=True)
    compute_s = check_number(compute_s, "compute_s", 0, open_low=True)
    workers = check_int(workers, "workers", 2)   # one worker has nothing to exchange
    link = cost.Link.gbit(gbit, latency_us * 1e-6)
    nbytes = cost.gradient_bytes(params)
    rows = []
    if isinstance(codec_ns, str):
        if codec_ns != "measure":
            raise ValueError(f"codec_ns must be a dict or 'measure', got {codec_ns!r}")
        codec_ns = measured_codecs()
    shapes = transformer_shapes(params) if layer_shapes is None else [tuple(s) for s in layer_shapes]
    for o in options(codec_ns, shapes, powersgd_rank):
        comm = cost.comm_time(nbytes / o.ratio, workers, link, o.collective)
        codec = o.codec_ns * 1e-9 * params
        step = cost.iteration_time(compute_s + codec, comm, overlap=overlap, buckets=buckets if overlap else None)
        rows.append({"scheme": o.name, "collective": o.collective, "R": o.ratio,
                     "MB per worker": nbytes / o.ratio / 1e6, "comm s": comm, "codec s": codec,
                     "step s": step, "complexity": o.complexity, "needs": o.needs})
    per_step = list(rows)
    if local_steps is not None:
        H = check_int(local_steps, "local_steps", 2)
        int8 = scheme_wire("int8", shapes)[0]
        for name, ratio, codec in ((f"local H={H}", 1.0, 0.0), (f"local H={H} int8", int8, codec_ns["int8"])):
            comm = cost.comm_time(nbytes / ratio, workers, link, "allreduce")
            rows.append({"scheme": name, "collective": "allreduce", "R": ratio * H, "MB per worker": nbytes / ratio / 1e6,
                         "comm s": comm / H, "codec s": codec * 1e-9 * params / H,
                         "step s": compute_s + (comm + codec * 1e-9 * params) / H, "complexity": 3,
                         "needs": N_("an outer optimizer (SGD with Nesterov momentum) and more tokens to match synchronous training; a larger H saves bytes and costs quality")})
    dense = rows[0]
    for r in rows:
        r["speedup"] = dense["step s"] / r["step s"]
    share = dense["comm s"] / (compute_s + dense["comm s"])
    ceiling = (compute_s + dense["comm s"]) / compute_s
    best = min(rows, key=lambda r: r["step s"])
    reasons = [_("dense all-reduce: {v:.3g} s of communication against {compute_s:.3g} s of compute ({share:.0%} of a serial step); no scheme can beat {ceiling:.2f}x").format(v=dense['comm s'], compute_s=compute_s, share=share, ceiling=ceiling)]
    if share < small_share:
        choice = "dense"
        reasons.append(_("communication is under {small_share:.0%} of the step: compression cannot pay for its risk; keep dense all-reduce with bucketed overlap").format(small_share=small_share))
    else:
        fine = [r for r in rows if r["step s"] <= best["step s"] * (1 + tolerance)]
        pick = min(fine, key=lambda r: (r["complexity"], r["step s"]))
        choice = pick["scheme"]
        reasons.append(_("fastest: {v} at {v2:.3g} s per step ({v3:.2f}x)").format(v=best['scheme'], v2=best['step s'], v3=best['speedup']))
        if pick is not best:
            reasons.append(_("{choice} is within {tolerance:.0%} of it ({v:.3g} s) and simpler").format(choice=choice, tolerance=tolerance, v=pick['step s']))
        reasons.append(_("{choice} needs: {v}").format(choice=choice, v=_(pick['needs'])))
        gathers = [r for r in rows if r["collective"] == "allgather" and r["speedup"] < 1]
        if gathers:
            reasons.append(_("slower than dense here: {v} (all-gathered packets grow with the {workers} workers, or the codec costs more than it saves)").format(v=', '.join(r['scheme'] for r in gathers), workers=workers))
    if local_steps is not None:
        reasons.append(local_sentence(min(per_step, key=lambda r: r["step s"]),
                                      min(rows[len(per_step):], key=lambda r: r["step s"]), tolerance))
    return Advice(rows, choice, reasons, share, ceiling,
                  dict(params=params, workers=workers, gbit=gbit, compute_s=compute_s, latency_us=latency_us,
                       overlap=overlap, buckets=buckets))


def local_sentence(step_row: dict, local_row: dict, tolerance: float = 0.1) -> str:
    """Whether local steps beat the best per-step scheme, in words that follow the numbers.

    >>> local_sentence({"scheme": "int8", "step s": 2.0}, {"scheme": "local H=100", "step s": 1.0})
    'local H=100 beats the best per-step scheme, int8: 1 s per step against 2 s (2.00x faster)'
    """
    a, b = local_row["step s"], step_row["step s"]
    r = b / a if a <= b else a / b
    if r - 1 <= tolerance:
        text = _("local steps ({local}) and the best per-step scheme ({step}) are within {tolerance:.0%} of each other: {a:.3g} s and {b:.3g} s per step; prefer the per-step scheme, which trains as synchronous training does")
    elif a < b:
        text = _("{local} beats the best per-step scheme, {step}: {a:.3g} s per step against {b:.3g} s ({r:.2f}x faster)")
    else:
        text = _("{local} does not pay here: {a:.3g} s per step against {b:.3g} s for {step} ({r:.2f}x slower)")
    return text.format(local=local_row["scheme"], step=step_row["scheme"], a=a, b=b, r=r, tolerance=tolerance)


# Bytes each codec moves through memory per parameter, compress and decode together, for
# kernels that stream the fp32 gradient: read it to find the scale or threshold, read it
# again to encode, write the payload; decode writes the fp32 result (sparse: zero-fill, then
# scatter). An ASSUMPTION, not a measurement: casts and quantizers do stream, but an exact
# Top-K on a GPU is a selection (radix select or sort) and runs slower than a stream; no GPU
# has timed these kernels for the course.
BYTES_MOVED = {"bf16": 4 + 2 + 2 + 4, "powersgd": 4 + 4 + 4, "int8": 4 + 4 + 1 + 1 + 4,
               "topk1%+EF": 4 + 4 + 4 + 4, "topk1%+int8+EF": 4 + 4 + 4 + 4 + 2, "sign+EF": 4 + 4 + 0.25 + 4}


def memory_bound_codecs(mem_gbps: float = 2000.0) -> dict:
    """Codec nanoseconds per parameter on a device with `mem_gbps` GB/s of memory bandwidth,
    *assuming* memory-bound kernels that move BYTES_MOVED bytes per parameter: the best case
    for a GPU, labelled as an assumption wherever the course uses it (an exact Top-K
    selection is slower than a streaming pass; nothing here was timed on a GPU).

    >>> round(memory_bound_codecs(2000)["topk1%+EF"], 4)    # 16 bytes at 2 TB/s
    0.008
    """
    mem_gbps = check_number(mem_gbps, "mem_gbps", 0, open_low=True)
    return {name: b / mem_gbps for name, b in BYTES_MOVED.items()}


_MEASURED: dict = {}


def measured_codecs() -> dict:
    """measure_codecs(), once per process."""
    if not _MEASURED:
        _MEASURED.update(measure_codecs())
    return dict(_MEASURED)


def measure_codecs(numel: int = 1_000_000, repeats: int = 3) -> dict:
    """Your machine's codec cost in nanoseconds per parameter (compress + decode), by option
    name, measured on a `numel`-entry random gradient."""
    import torch
    from .compressors import Cast, Chain, Quantize, Sign, TopK, PowerSGD
    side = int(math.isqrt(numel))
    comps = {"bf16": Cast(torch.bfloat16), "int8": Quantize(8), "topk1%+EF": TopK(0.01),
             "topk1%+int8+EF": Chain(TopK(0.01), Quantize(8)), "sign+EF": Sign()}
    out = {name: 1e9 * codec_seconds(c, numel, repeats) / numel for name, c in comps.items()}
    ps = PowerSGD(rank=4)
    m = torch.randn(side, side)
    seconds = median(time_it(lambda: ps.decompress(ps.compress(m)), repeat=repeats))
    out["powersgd"] = 1e9 * seconds / m.numel()
    return out
