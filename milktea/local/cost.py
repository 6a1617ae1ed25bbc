"""What local steps cost on a link: bytes and seconds per outer step, amortised per inner
step, the share of time spent computing, and the bandwidth a target share needs (the
calculator of Douillard's DiLoCo page, on milktea's alpha-beta model, so a `Link`
calibrated on your own machine prices it).

    >>> from milktea.cost import Link
    >>> c = local_cost(10e9, workers=8, inner_steps=100, link=Link.gbit(1), compute_s=1.0, bits=8)
    >>> round(c.ratio), round(c.utilisation, 2)     # INTELLECT-1's 400x: H x 32 / 8
    (400, 0.42)
    >>> round(bandwidth_for(0.9, 10e9, workers=8, inner_steps=100, compute_s=1.0, bits=8) / 125e6, 1)
    12.6

`bits` prices an ideal quantizer (bits / 8 bytes per value, no header); `compressor`
measures a milktea compressor's real packet on a sample and scales it to the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import cost
from ..checks import check_int, check_number

SAMPLE = 1 << 16      # values in the sample a compressor's bytes per value are measured on


def report_bytes(params: float, *, compressor=None, bits: float | None = None) -> float:
    """Bytes of one worker's pseudo-gradient of `params` values: fp32 (4 per value) by
    default, `bits` / 8 per value for an ideal quantizer, or a milktea compressor's real
    packet measured on a Gaussian sample of up to 65,536 values and scaled to `params`.

    >>> report_bytes(1e6), report_bytes(1e6, bits=8)
    (4000000.0, 1000000.0)
    """
    params = check_number(params, "params", 0, open_low=True)
    if compressor is not None and bits is not None:
        raise ValueError("give compressor= or bits=, not both")
    if bits is not None:
        return params * check_number(bits, "bits", 0, 32, open_low=True) / 8
    if compressor is None:
        return params * 4.0
    from .config import check_compressor
    from .exchange import torch_kernels
    check_compressor(compressor)
    n = int(min(params, SAMPLE))
    sample = torch.randn(n, generator=torch.Generator().manual_seed(0))
    with torch_kernels():                # numba's pool, once started, slows the torch work after it
        return compressor.fork(0, 0).compress(sample).nbytes * params / n


def _link_terms(nbytes: float, workers: int, link: cost.Link, collective: str) -> tuple[float, float]:
    """(latency part, seconds per byte/s): comm_time = a + b / bandwidth for this collective."""
    fixed = cost.comm_time(nbytes, workers, cost.Link(1e300, link.latency), collective)
    per = cost.comm_time(nbytes, workers, cost.Link(1.0, link.latency), collective) - fixed
    return fixed, per


@dataclass(frozen=True)
class LocalCost:
    """One outer step (H inner steps) of every worker, priced."""
    params: float
    workers: int
    inner_steps: int
    fragments: int
    overlap: int
    compute_s: float            # one inner step of one worker
    report_bytes: float         # one worker's pseudo-gradient, all fragments
    dense_bytes: float          # one fp32 gradient: what data parallelism sends every step
    comm_s: float               # the link's time for all fragments' exchanges of one outer step
    exposed_s: float            # the part of it the workers wait for (not hidden by overlap)

    @property
    def ratio(self) -> float:
        """x fewer bytes than data parallelism over the same inner steps."""
        return self.dense_bytes * self.inner_steps / self.report_bytes

    @property
    def bytes_per_inner_step(self) -> float:
        return self.report_bytes / self.inner_steps

    @property
    def outer_step_s(self) -> float:
        return self.inner_steps * self.compute_s + self.exposed_s

    @property
    def step_s(self) -> float:
        """Seconds per inner step, the exchange amortised."""
        return self.outer_step_s / self.inner_steps

    @property
    def utilisation(self) -> float:
        """Share of the time spent computing."""
        return self.inner_steps * self.compute_s / self.outer_step_s

    def row(self) -> dict:
        return {"H": self.inner_steps, "MB per outer step": self.report_bytes / 1e6,
                "x fewer bytes": self.ratio, "comm s": self.comm_s, "s per inner step": self.step_s,
                "compute share": self.utilisation}


def _check(params, workers, inner_steps, compute_s, fragments, overlap):
    params = check_number(params, "params", 0, open_low=True)
    workers, H = check_int(workers, "workers", 2), check_int(inner_steps, "inner_steps H", 1)
    compute_s = check_number(compute_s, "compute_s", 0, open_low=True)
    P, tau = check_int(fragments, "fragments", 1), check_int(overlap, "overlap", 0)
    if H % P:
        raise ValueError(f"fragments={P} does not divide inner_steps H={H}")
    if tau >= H:
        raise ValueError(f"overlap tau={tau} must be < inner_steps H={H}")
    return params, workers, H, compute_s, P, tau


def local_cost(params: float, workers: int, inner_steps: int, link: cost.Link, compute_s: float, *,
               compressor=None, bits: float | None = None, fragments: int = 1, overlap: int = 0,
               collective: str = "allreduce") -> LocalCost:
    """Price H inner steps and one exchange of every fragment. Each of the P fragments
    (1/P of the bytes) goes through `collective` ("allreduce": a ring on the report's bytes,
    as INTELLECT-1's int8 all-reduce; "allgather": every packet to every worker, as
    milktea.local's exchange does) while `overlap` inner steps go on; what the overlap does
    not hide is exposed. H = 1 with fp32 reports is data parallelism without overlap."""
    params, workers, H, compute_s, P, tau = _check(params, workers, inner_steps, compute_s, fragments, overlap)
    if not isinstance(link, cost.Link):
        raise TypeError(f"link must be a milktea.cost.Link (e.g. Link.gbit(1)), got {type(link).__name__}")
    total = report_bytes(params, compressor=compressor, bits=bits)
    one = cost.comm_time(total / P, workers, link, collective)
    exposed = max(0.0, one - tau * compute_s)
    return LocalCost(params, workers, H, P, tau, compute_s, total, params * 4.0, P * one, P * exposed)


def bandwidth_for(utilisation: float, params: float, workers: int, inner_steps: int, compute_s: float, *,
                  latency: float = 50e-6, compressor=None, bits: float | None = None, fragments: int = 1,
                  overlap: int = 0, collective: str = "allreduce") -> float:
    """The link bandwidth (bytes/s) at which H inner steps keep the workers computing
    `utilisation` of the time; math.inf when the latency alone already costs more.

    >>> b = bandwidth_for(0.5, 1e9, workers=4, inner_steps=1, compute_s=0.5)     # DDP
    >>> round(b / bandwidth_for(0.5, 1e9, workers=4, inner_steps=100, compute_s=0.5))
    100
    """
    u = check_number(utilisation, "utilisation", 0, 1, open_low=True, open_high=True)
    params, workers, H, compute_s, P, tau = _check(params, workers, inner_steps, compute_s, fragments, overlap)
    latency = check_number(latency, "latency", 0)
    total = report_bytes(params, compressor=compressor, bits=bits)
    fixed, per = _link_terms(total / P, workers, cost.Link(1.0, latency), collective)
    # P * max(0, fixed + per / B - tau c) <= H c (1 / u - 1)
    room = H * compute_s * (1 / u - 1) / P + tau * compute_s - fixed
    if room <= 0:
        return math.inf
    return per / room
