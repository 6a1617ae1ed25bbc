"""Gradient accumulation: exchange once every `a` micro-batches, priced and trained.

    >>> [round(r["s per micro-batch"], 3) for r in accumulation_time(0.05, 0.2, [1, 8])]
    [0.25, 0.075]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checks import check_positive_int


def accumulation_time(compute_s: float, comm_s: float, accumulate) -> list[dict]:
    """Seconds per micro-batch when the gradient is exchanged once every `a` micro-batches:
    (a * compute + comm) / a. Communication per sample falls as 1/a."""
    rows = []
    for a in accumulate:
        check_positive_int(a, "accumulate")
        rows.append({"accumulate": a, "s per micro-batch": (a * compute_s + comm_s) / a,
                     "comm share": comm_s / (a * compute_s + comm_s)})
    return rows


@dataclass
class Accumulated:
    accumulate: int
    history: object
    exchanges: int
    mb_per_worker: float
    accuracy: float = field(default=0.0)


def accumulation_runs(task, accumulate=(1, 2, 4, 8), micro_batch: int = 16, samples: int = 3200,
                      workers: int = 8, lr: float = 0.1, scale_lr: bool = True, compressor=None,
                      device=None) -> list[Accumulated]:
    """Train on the same number of samples per worker, exchanging every `a` micro-batches.
    Accumulating `a` micro-batches of b and stepping once is one step with a batch of a*b, so
    each run is the simulator with batch a*b and samples/(a*b) steps; `scale_lr` multiplies
    the learning rate by `a` (the linear scaling rule for a batch `a` times larger)."""
    from ..simulate import simulate
    out = []
    for a in accumulate:
        steps = max(1, samples // (a * micro_batch))
        h = simulate(task, compressor, workers=workers, steps=steps, lr=lr * a if scale_lr else lr,
                     batch=a * micro_batch,
                     eval_every=max(1, steps // 10), device=device, progress=False)
        out.append(Accumulated(a, h, steps, h.total_bytes / workers / 1e6, h.final("accuracy")))
    return out


def accuracy_sentence(runs: list, noise_points: float = 1.0) -> str:
    """`accumulation_runs` in words: each run's accuracy after the same samples against the
    run that exchanges every micro-batch (ahead, behind, or level within `noise_points`)."""
    from ..i18n import _
    from . import verdicts
    first = runs[0]
    parts = [_("every {a} micro-batches: {acc:.1%}, {gap}").format(
        a=r.accumulate, acc=r.accuracy, gap=verdicts.gap(r.accuracy, first.accuracy, _("exchanging every micro-batch"),
                                                         noise_points / 100)) for r in runs[1:]]
    text = _("After the same samples, exchanging every micro-batch reaches {acc:.1%}; {parts}.").format(
        acc=first.accuracy, parts=_("; ").join(parts))
    return verdicts.tidy(text)


def time_sentence(rows: list[dict]) -> str:
    """`accumulation_time`'s rows in words: the time per micro-batch and the link's share of
    it, exchanging every micro-batch against the largest accumulation priced.

    >>> print(time_sentence(accumulation_time(0.05, 0.2, [1, 8])))
    Exchanging every 8 micro-batches instead of every one: 75 ms per micro-batch instead of 250 ms (3.33x faster), and the link's share of the time falls from 80% to 33%.
    """
    from ..i18n import _
    from . import verdicts
    one, last = rows[0], rows[-1]
    return verdicts.tidy(_("Exchanging every {a} micro-batches instead of every one: {t:.0f} ms per micro-batch instead "
                           "of {t1:.0f} ms ({said}), and the link's share of the time falls from {s1:.0%} to "
                           "{s:.0%}.").format(a=last["accumulate"], t=1e3 * last["s per micro-batch"],
                                              t1=1e3 * one["s per micro-batch"],
                                              said=verdicts.speed(last["s per micro-batch"], one["s per micro-batch"]),
                                              s1=one["comm share"], s=last["comm share"]))
