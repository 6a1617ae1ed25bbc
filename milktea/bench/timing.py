"""Timing helpers shared by the benchmarks (built on milktea.timing)."""
from __future__ import annotations

from typing import Callable

from ..timing import median, time_it


def measure(fn: Callable[[], object], repeat: int = 7, warmup: int = 1, sync: Callable[[], None] | None = None):
    """Median and min wall time of fn() in seconds, after `warmup` untimed calls."""
    times = time_it(fn, repeat, warmup, sync)
    return median(times), min(times)


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain-text table: one line per row, columns padded to fit."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths))
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])
