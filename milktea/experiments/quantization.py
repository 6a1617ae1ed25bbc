"""Quantization measured on real gradients: the half-step bound, bits vs error, chunked
scales, stochastic rounding's unbiasedness, QSGD's variance bound, Top-K then quantize.

    >>> g = digits_gradient()
    >>> rows = half_step_check(g)                 # one row per bit width
    >>> all(r.holds for r in rows)               # |error| <= scale / 2 (to float32 rounding)
    True
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from ..checks import check_grad, check_positive_int
from ..i18n import _
from ..compressors import QSGD, Cast, Chain, Compressor, Quantize, Sign, TopK
from ..compressors.wire import from_bytes
from ..packet import Packet


def digits_gradient(hidden: int = 256, batch: int = 64, warmup_steps: int = 20, lr: float = 0.1,
                    seed: int = 0) -> torch.Tensor:
    """A real gradient: the flat float32 gradient of the digits MLP on one minibatch, after
    `warmup_steps` steps of plain SGD from the seeded initial weights (so it is not the
    special first-step gradient)."""
    from ..tasks import Digits
    check_positive_int(hidden, "hidden"), check_positive_int(batch, "batch")
    check_positive_int(warmup_steps, "warmup_steps", minimum=0)
    task = Digits(hidden=hidden, seed=seed)
    model = task.model()
    x, y = task.x_train, task.y_train
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(warmup_steps + 1):
        idx = torch.randint(len(y), (batch,), generator=g)
        opt.zero_grad()
        task.loss(model(x[idx]), y[idx]).mean().backward()
        if step < warmup_steps:
            opt.step()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).detach().clone()


def steps_of(packet: Packet) -> torch.Tensor:
    """The grid step (scale) each entry of a ``quant`` packet was rounded with."""
    if packet.codec != "quant":
        raise ValueError(f"steps_of needs a Quantize packet (codec 'quant'), got codec {packet.codec!r}")
    chunk = packet.params[1]
    scales = from_bytes(packet.parts[1], torch.float32)
    return scales.repeat_interleave(chunk)[:packet.numel]


@dataclass
class HalfStep:
    """One bit width on one tensor: wire bytes, and the error against the half-step bound."""
    bits: int
    nbytes: int
    ratio: float
    max_error: float
    worst: float            # max over entries of |error| / (its step / 2): the bound says <= 1
    mean_error: float
    errors: torch.Tensor    # |error| / (step / 2), per entry (for histograms)

    @property
    def tolerance(self) -> float:
        """How far past 1 float32 arithmetic may push `worst`: the codes are computed as
        floor(x / s + qmax + 1.5) in float32, whose rounding is up to (qmax + 1) 2^-23 code
        units; half a step is 0.5 code units, and we allow twice that."""
        return (2 ** (self.bits - 1)) * 2.0 ** -21

    @property
    def holds(self) -> bool:
        return self.worst <= 1 + self.tolerance


def half_step_check(x: torch.Tensor, bits=(8, 4, 2), chunk: int | None = 1024) -> list[HalfStep]:
    """Quantize `x` with each bit width and compare every entry's error with half its step."""
    x = check_grad(x, "x").float()
    rows = []
    for b in bits:
        q = Quantize(bits=b, chunk=chunk)
        p = q.compress(x)
        err = (q.decompress(p) - x).abs().reshape(-1)
        half = steps_of(p) / 2
        rel = torch.where(half > 0, err / half.clamp_min(1e-38), torch.zeros_like(err))
        rows.append(HalfStep(b, p.nbytes, p.ratio, float(err.max()), float(rel.max()), float(err.mean()), rel))
    return rows


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """||y - x|| / ||x||."""
    return float((y - x).norm() / x.norm().clamp_min(1e-38))


@dataclass
class Row:
    """One compressor on one tensor."""
    name: str
    bits_per_entry: float    # wire bits / entries, header and scales included
    nbytes: int
    ratio: float
    rel_error: float
    cosine: float

    def as_dict(self) -> dict:
        return {"scheme": self.name, "bits/entry": round(self.bits_per_entry, 3), "bytes": self.nbytes,
                "R": round(self.ratio, 2), "relative error": round(self.rel_error, 4),
                "cosine": round(self.cosine, 4)}


def measure(x: torch.Tensor, compressor: Compressor) -> Row:
    """Compress `x` once: real wire bytes, relative error, cosine with the original."""
    x = check_grad(x, "x")
    p = compressor.compress(x)
    y = compressor.decompress(p)
    cos = float(torch.nn.functional.cosine_similarity(x.reshape(1, -1).float(), y.reshape(1, -1).float()))
    return Row(compressor.name, 8 * p.nbytes / x.numel(), p.nbytes, p.ratio, relative_error(x.float(), y.float()), cos)


def bit_widths(x: torch.Tensor, chunk: int | None = 1024) -> list[Row]:
    """fp32 -> fp16, int8, int4, 2-bit and 1-bit (sign + scale) on the same tensor."""
    return [measure(x, c) for c in (Cast(torch.float16), Quantize(8, chunk), Quantize(4, chunk),
                                    Quantize(2, chunk), Sign())]


def chunk_sweep(x: torch.Tensor, bits: int = 4, chunks=(None, 4096, 1024, 256, 64, 16),
                skip: int | None = None) -> list[dict]:
    """Relative error and bits per entry as the number of entries sharing one scale shrinks
    (None: one scale for the whole tensor). `skip`: a flat position left out of the error
    (an outlier, whose own error would hide everyone else's). "zeroed" is the share of
    non-zero entries that arrive as exactly 0."""
    x = check_grad(x, "x").float().reshape(-1)
    keep = torch.ones_like(x, dtype=torch.bool)
    if skip is not None:
        keep[skip] = False
    out = []
    for c in chunks:
        q = Quantize(bits, c)
        p = q.compress(x)
        y = q.decompress(p)
        nz = keep & (x != 0)
        out.append({"chunk": "tensor" if c is None else c, "bits/entry": 8 * p.nbytes / x.numel(),
                    "relative error": relative_error(x[keep], y[keep]),
                    "zeroed": float((y[nz] == 0).float().mean())})
    return out


def with_outlier(x: torch.Tensor, factor: float = 100.0, position: int = 0) -> torch.Tensor:
    """A copy of `x` where one entry is `factor` times the largest magnitude (one loud shop)."""
    y = check_grad(x, "x").clone().reshape(-1)
    y[position] = factor * y.abs().max()
    return y.view_as(x)


@dataclass
class Bias:
    """How far the mean of `draws` decoded copies is from x, after each number of draws."""
    draws: list[int]
    stochastic: list[float]     # ||mean_T - x|| / ||x|| with stochastic rounding
    nearest: list[float]        # the same with round-to-nearest (deterministic: one value)
    per_draw_error: dict        # mean relative error of a single copy, per rounding


def rounding_bias(x: torch.Tensor, bits: int = 2, draws: int = 256, chunk: int | None = 1024,
                  seed: int = 0) -> Bias:
    """Average many decoded copies of x. Stochastic rounding is unbiased, so the average
    approaches x (like 1/sqrt(T)); rounding to nearest gives the same copy every time, so
    its error never shrinks."""
    x = check_grad(x, "x").float()
    check_positive_int(draws, "draws")
    sto, near = Quantize(bits, chunk, stochastic=True, seed=seed), Quantize(bits, chunk)
    fixed = near.decompress(near.compress(x))
    total, errs, marks, out = torch.zeros_like(x), [], [], []
    for t in range(1, draws + 1):
        y = sto.decompress(sto.compress(x))
        total += y
        errs.append(relative_error(x, y))
        if t & (t - 1) == 0 or t == draws:     # powers of two, and the last
            marks.append(t)
            out.append(relative_error(x, total / t))
    e_near = relative_error(x, fixed)
    return Bias(marks, out, [e_near] * len(marks), {"stochastic": sum(errs) / len(errs), "nearest": e_near})


def tiny_updates(steps: int = 200, small: float = 0.002, big: float = 1.0, bits: int = 8, seeds: int = 30) -> dict:
    """A weight that gets the same small push every step, sent in a chunk that also holds a
    big entry: the push is below half a step. Returns the running sum each rounding delivers:
    "nearest" rounds it to 0 forever; "stochastic" is the mean over `seeds` independent runs,
    with every run in "runs" ([seeds, steps]): each single run wanders, their mean follows the
    truth."""
    check_positive_int(steps, "steps"), check_positive_int(seeds, "seeds")
    x = torch.tensor([big, small])
    near = Quantize(bits, None)
    nearest = float(near.decompress(near.compress(x))[1])
    # every run's pair in one tensor, one scale per pair (chunk=2): one call draws for all runs,
    # and each entry's draw is its own (a hash of the call's key and the entry's index)
    pairs, c = x.repeat(seeds), Quantize(bits, 2, stochastic=True, seed=0)
    got = torch.stack([c.decompress(c.compress(pairs))[1::2] for _step in range(steps)], dim=1)
    runs = got.double().cumsum(1)
    t = torch.arange(1, steps + 1, dtype=torch.float64)
    return {"true": (t * small).tolist(), "nearest": (t * nearest).tolist(),
            "stochastic": runs.mean(0).tolist(), "runs": runs.numpy(), "step": big / (2 ** (bits - 1) - 1)}


@dataclass
class Variance:
    levels: int
    bits: int
    measured: float     # E||Q(x) - x||^2 / ||x||^2, averaged over draws
    bound: float        # sum over chunks of min(d/s^2, sqrt(d)/s) ||x_c||^2, over ||x||^2
    bias: float         # ||mean of draws - x|| / ||x|| (-> 0: unbiased)


def qsgd_variance(x: torch.Tensor, levels=(1, 2, 4, 8, 16, 64), chunk: int | None = 512,
                  draws: int = 100, seed: int = 0) -> list[Variance]:
    """QSGD's variance bound (Alistarh et al. 2017, Lemma 3.1), checked by sampling."""
    x = check_grad(x, "x").float().reshape(-1)
    check_positive_int(draws, "draws")
    n = x.numel()
    d = n if chunk is None else min(chunk, n)
    pieces = x.split(d)
    out = []
    for s in levels:
        q = QSGD(levels=s, chunk=chunk, seed=seed)
        sq, mean = 0.0, torch.zeros_like(x)
        for _draw in range(draws):
            y = q.decompress(q.compress(x))
            sq += float((y - x).pow(2).sum())
            mean += y
        bound = sum(min(p.numel() / s**2, math.sqrt(p.numel()) / s) * float(p.pow(2).sum()) for p in pieces)
        norm2 = float(x.pow(2).sum())
        out.append(Variance(s, q.bits, sq / draws / norm2, bound / norm2, relative_error(x, mean / draws)))
    return out


def stacked(x: torch.Tensor, ratio: float = 0.01) -> list[dict]:
    """Top-K, then quantize the kept values: where the bytes go (header, indices, values)."""
    schemes = [TopK(ratio), Chain(TopK(ratio), Quantize(8, None)), Chain(TopK(ratio), Quantize(4, None)),
               Chain(TopK(ratio), Sign())]
    rows = []
    for c in schemes:
        p = c.compress(x)
        if p.codec == "chain":
            inner = Packet.from_tensor(p.parts[-1])
            index, values = sum(q.numel() for q in p.parts[:-1]), inner.nbytes
        else:
            index, values = p.parts[0].numel(), p.parts[1].numel()
        header = p.nbytes - index - values
        y = c.decompress(p)
        rows.append({"scheme": c.name, "header": header, "indices": index, "values": values,
                     "bytes": p.nbytes, "R": p.ratio, "relative error": relative_error(x.float(), y.float())})
    return rows


WIDTHS = (1, 2, 4, 8)


def quantizer(bits: int, chunk: int | None = 1024, stochastic: bool = False, seed: int = 0) -> Compressor:
    """The library compressor for a bit width: Sign (1 bit + a scale) or absmax Quantize."""
    if bits not in WIDTHS:
        raise ValueError(f"bits must be one of {WIDTHS}, got {bits!r}")
    return Sign() if bits == 1 else Quantize(bits, chunk, stochastic=stochastic, seed=seed)


@dataclass
class Snap:
    """Values before and after quantization, and the grid they snap to (first chunk)."""
    name: str
    x: torch.Tensor          # the original values (flat)
    y: torch.Tensor          # what the receiver decodes
    grid: torch.Tensor       # the levels of the first chunk's grid
    half_step: float         # half the first chunk's step (0 for 1-bit sign)
    nbytes: int
    ratio: float
    rel_error: float
    steps: torch.Tensor | None = None   # each entry's own chunk step (None for 1-bit sign)

    @property
    def error(self) -> torch.Tensor:
        return self.y - self.x

    @property
    def error_in_half_steps(self) -> torch.Tensor | None:
        """Each entry's error divided by half of *its own chunk's* step: within [-1, 1] when
        rounding to nearest, [-2, 2] with stochastic rounding; None for sign."""
        if self.steps is None:
            return None
        half = self.steps / 2
        return torch.where(half > 0, self.error / half.clamp_min(1e-30), torch.zeros_like(half))


def snap(x: torch.Tensor, bits: int = 4, chunk: int | None = 1024, stochastic: bool = False,
         seed: int = 0) -> Snap:
    """Quantize `x` with `bits` bits and describe the grid (what the snapping widget draws)."""
    x = check_grad(x, "x").float().reshape(-1)
    c = quantizer(bits, chunk, stochastic, seed)
    p = c.compress(x)
    y = c.decompress(p)
    if bits == 1:
        scale = float(from_bytes(p.parts[1], torch.float32)[0])
        grid, half = torch.tensor([-scale, scale]), 0.0
    else:
        steps = steps_of(p)
        step = float(steps[0])
        q = 2 ** (bits - 1) - 1
        grid, half = torch.arange(-q, q + 1, dtype=torch.float32) * step, step / 2
        return Snap(c.name, x, y, grid, half, p.nbytes, p.ratio, relative_error(x, y), steps)
    return Snap(c.name, x, y, grid, half, p.nbytes, p.ratio, relative_error(x, y))


def onebit_adam(task=None, *, workers: int = 4, steps: int = 60, warmups=(12, 1), lr: float = 0.01,
                eval_every: int = 10, seed: int = 0, device=None):
    """Adam on a dense all-reduce beside 1-bit Adam with each warm-up in `warmups`, in the
    simulator (digits by default). Returns (histories, rows); a row has the run's label,
    its warm-up, held-out accuracy and loss, the bytes a worker sent per step after the
    longest warm-up (`R`: dense bytes over those), and `R whole run`: dense bytes over the
    bytes of every step the run took, warm-up included. DeepSpeed advises a warm-up
    (`freeze_step`) of 15-25% of all steps; the default is 12 of 60.

    >>> hs, rows = onebit_adam(workers=2, steps=12, warmups=(4,), eval_every=12, device="cpu")
    >>> [r["warmup"] for r in rows], rows[1]["R"] > 20, rows[1]["diverged_at"]
    ([None, 4], True, None)
    """
    from ..onebit import OneBitAdam
    from ..simulate import simulate
    from ..tasks import Digits
    task = Digits(hidden=32) if task is None else task
    check_positive_int(steps, "steps")
    if not warmups or any(not isinstance(w, int) or isinstance(w, bool) or not 1 <= w < steps for w in warmups):
        raise ValueError(f"warmups must be ints from 1 to steps - 1 ({steps - 1}), got {warmups!r}")
    after = max(warmups)
    histories, rows = [], []
    for warmup in (None, *warmups):
        with warnings.catch_warnings():   # a run that blows up is a result here: see diverged_at
            warnings.simplefilter("ignore", UserWarning)
            h = simulate(task, workers=workers, steps=steps, seed=seed, progress=False, device=device,
                         eval_every=eval_every, optimizer=OneBitAdam(lr=lr, warmup=warmup))
        h.scheme = _("Adam, dense") if warmup is None else _("1-bit Adam, warm-up {n}").format(n=warmup)
        late = h.bytes_per_worker[after:]
        per_step = sum(late) / len(late)
        histories.append(h)
        rows.append({"run": h.scheme, "warmup": warmup, "accuracy": h.final("accuracy"), "loss": h.final("loss"),
                     "bytes_per_step": per_step, "R": h.dense_bytes / per_step,
                     "R whole run": h.dense_bytes * len(h.bytes_per_worker) / sum(h.bytes_per_worker),
                     "diverged_at": h.diverged_at})
    return histories, rows
