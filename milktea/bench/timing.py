"""Timing helpers shared by the benchmarks (built on milktea.timing)."""
from __future__ import annotations

from typing import Callable

from ..tables import text_table as table  # noqa: F401  (the benchmarks print through it)
from ..timing import median, time_it


def measure(fn: Callable[[], object], repeat: int = 7, warmup: int = 1, sync: Callable[[], None] | None = None):
    """Median and min wall time of fn() in seconds, after `warmup` untimed calls."""
    times = time_it(fn, repeat, warmup, sync)
    return median(times), min(times)
