"""What a local-step run is told: the scheme (DiLoCo, or data parallel for comparison) and
the outages to simulate. Every setting is checked here, before any training starts.

    >>> DiLoCo(inner_steps=100, compressor=None).label
    'diloco H=100'
    >>> DiLoCo(inner_steps=0)
    Traceback (most recent call last):
    ...
    ValueError: inner_steps H must be >= 1 (inner steps between two exchanges), got 0
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import check_int, check_number
from .optim import INNER, AdamW, OuterSGD

PROTOCOLS = ("allgather", "allreduce")   # packets that one worker's pseudo-gradient fills alone


def check_compressor(compressor, what: str = "compressor"):
    """A milktea Compressor that can carry a pseudo-gradient (one flat vector per worker
    and fragment, averaged by the receivers), or None for dense fp32."""
    if compressor is None:
        return None
    from ..compressors import Compressor
    from ..feedback import ErrorFeedback
    if isinstance(compressor, ErrorFeedback):
        raise TypeError(f"{what}: pass the compressor itself ({compressor.compressor!r}), not a ledger: local "
                        f"steps keep one ledger per worker and fragment (error_feedback=True)")
    if not isinstance(compressor, Compressor):
        raise TypeError(f"{what} must be a milktea Compressor (e.g. Quantize(bits=8)) or None, "
                        f"got {type(compressor).__name__}")
    protocol = getattr(compressor, "protocol", "allgather")
    if protocol not in PROTOCOLS:
        raise ValueError(f"{what} {compressor!r} cannot carry a pseudo-gradient: its packets travel by "
                         f"protocol {protocol!r} (low-rank factors summed on the wire, or chunks "
                         f"re-compressed by other workers), and a pseudo-gradient is one flat vector "
                         f"per worker; use Quantize, TopK, Chain(TopK(...), Quantize(...)), Sign or Cast")
    return compressor


@dataclass(frozen=True)
class DiLoCo:
    """DiLoCo (Douillard et al. 2023) and Streaming DiLoCo (2025) in one setting.

    inner_steps: H, the inner optimizer steps each worker takes between exchanges.
    inner: the workers' optimizer (AdamW by default, or SGD).
    outer: head office's optimizer on the averaged pseudo-gradient (SGD lr 0.7, Nesterov 0.9).
    compressor: how each worker's pseudo-gradient crosses the wire (None: fp32).
    error_feedback: keep a ledger per worker and fragment (None: when the compressor is biased).
    fragments: P, parameter groups exchanged in turn, one every H / P steps (Streaming).
    overlap: tau, inner steps that run while a fragment's exchange is on the wire.
    alpha: how much of its own local fragment a worker keeps when the global one lands
        (0: take the global one, as DiLoCo does).
    """
    inner_steps: int = 100
    inner: object = field(default_factory=AdamW)
    outer: OuterSGD = field(default_factory=OuterSGD)
    compressor: object = None
    error_feedback: bool | None = None
    fragments: int = 1
    overlap: int = 0
    alpha: float = 0.0

    def __post_init__(self):
        import numbers
        H = self.inner_steps
        if isinstance(H, bool) or not isinstance(H, numbers.Integral):
            raise TypeError(f"inner_steps H must be an int, got {type(H).__name__} {H!r}")
        if H < 1:
            raise ValueError(f"inner_steps H must be >= 1 (inner steps between two exchanges), got {H}")
        if not isinstance(self.inner, INNER):
            raise TypeError(f"inner must be milktea.local.AdamW(...) or SGD(...), got {type(self.inner).__name__}")
        if not isinstance(self.outer, OuterSGD):
            raise TypeError(f"outer must be milktea.local.OuterSGD(lr=..., momentum=...), "
                            f"got {type(self.outer).__name__}")
        check_compressor(self.compressor)
        if self.error_feedback not in (None, True, False):
            raise TypeError(f"error_feedback must be True, False or None (automatic), got {self.error_feedback!r}")
        P = check_int(self.fragments, "fragments", 1)
        if H % P:
            raise ValueError(f"fragments={P} does not divide inner_steps H={H}: each fragment is exchanged "
                             f"every H steps, one every H / P steps; choose P among the divisors of H")
        check_int(self.overlap, "overlap", 0)
        if self.overlap >= H:
            raise ValueError(f"overlap tau={self.overlap} must be < inner_steps H={H}: a fragment's exchange "
                             f"must land before the same fragment is sent again")
        check_number(self.alpha, "alpha", 0, 1, open_high=True)

    @property
    def uses_feedback(self) -> bool:
        if self.compressor is None:
            return False
        return bool(self.compressor.biased) if self.error_feedback is None else self.error_feedback

    @property
    def label(self) -> str:
        s = f"diloco H={self.inner_steps}"
        if self.fragments > 1:
            s += f" P={self.fragments}" + (f" tau={self.overlap}" if self.overlap else "")
        if self.compressor is not None:
            s += " " + self.compressor.name + ("+ef" if self.uses_feedback else "")
        return s


@dataclass(frozen=True)
class DataParallel:
    """Synchronous data parallelism for comparison: every step the workers' gradients are
    averaged (through `compressor`, with a ledger when biased) and one optimizer steps.
    With compressor=None this is what DDP does.

    momentum_correction: DGC's per-step scheme (chapter 04): each worker keeps a velocity
    u <- m u + g with this m, feeds u into its ledger and clears the velocity where its
    packet sent entries (momentum factor masking, for Top-K and Random-K); head office
    applies the average with plain SGD (`optimizer=SGD(lr)`, no momentum of its own). The
    sound way to put error feedback under momentum, where a ledger feeding AdamW is not."""
    optimizer: object = field(default_factory=AdamW)
    compressor: object = None
    error_feedback: bool | None = None
    momentum_correction: float = 0.0

    def __post_init__(self):
        if not isinstance(self.optimizer, INNER):
            raise TypeError(f"optimizer must be milktea.local.AdamW(...) or SGD(...), "
                            f"got {type(self.optimizer).__name__}")
        check_compressor(self.compressor)
        if self.error_feedback not in (None, True, False):
            raise TypeError(f"error_feedback must be True, False or None (automatic), got {self.error_feedback!r}")
        m = check_number(self.momentum_correction, "momentum_correction", 0, 1, open_high=True)
        if m and (self.compressor is None or self.error_feedback is False):
            raise ValueError("momentum_correction keeps the velocity in each worker's ledger: give a compressor, "
                             "with error feedback")
        if m and (self.optimizer.name != "sgd" or self.optimizer.momentum):
            raise ValueError(f"with momentum_correction the momentum lives on the workers: head office applies "
                             f"the average with plain SGD (optimizer=SGD(lr=...), momentum 0), got {self.optimizer!r}")

    inner_steps = 1

    @property
    def uses_feedback(self) -> bool:
        if self.compressor is None:
            return False
        if self.momentum_correction:
            return True
        return bool(self.compressor.biased) if self.error_feedback is None else self.error_feedback

    @property
    def label(self) -> str:
        if self.compressor is None:
            return "ddp"
        return ("ddp " + self.compressor.name + ("+ef" if self.uses_feedback else "")
                + ("+mc" if self.momentum_correction else ""))


@dataclass(frozen=True)
class Outage:
    """Worker `worker` is closed from outer step `start` to outer step `stop` (not included):
    it trains nothing and sends nothing, and when it reopens it copies its state from a peer."""
    worker: int
    start: int
    stop: int

    def __post_init__(self):
        check_int(self.worker, "outage worker", 0)
        check_int(self.start, "outage start", 0)
        check_int(self.stop, "outage stop", 1)
        if self.stop <= self.start:
            raise ValueError(f"an outage must end after it starts: start={self.start}, stop={self.stop}")


def check_outages(outages, workers: int, outer_steps: int | None = None) -> tuple:
    """The outages, checked against the workers and (when known) the run's outer steps."""
    if outages is None:
        return ()
    outages = tuple(outages)
    for o in outages:
        if not isinstance(o, Outage):
            raise TypeError(f"outages must be milktea.local.Outage(worker, start, stop), got {type(o).__name__}")
        if o.worker >= workers:
            raise ValueError(f"outage of worker {o.worker}, but there are only {workers} workers (0..{workers - 1})")
        if outer_steps is not None and o.stop > outer_steps:
            raise ValueError(f"outage of worker {o.worker} ends at outer step {o.stop}, after the run's "
                             f"{outer_steps} outer steps")
    for k in range(max((o.stop for o in outages), default=0)):
        if all(closed(outages, w, k) for w in range(workers)):
            raise ValueError(f"every worker is closed at outer step {k}: nobody is left to train; "
                             f"keep at least one worker open")
    return outages


def closed(outages, worker: int, outer_step: int) -> bool:
    return any(o.worker == worker and o.start <= outer_step < o.stop for o in outages)
