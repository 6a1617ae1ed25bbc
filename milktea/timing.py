"""Wall-clock timing, in one place: the median of a few runs after a warm-up.

The median, not the mean: on a shared machine one run in several is slowed by something
else, and the median ignores it. For an even count `median` returns the upper of the two
middle values, so the answer is always a time that was really measured.

    >>> median([3.0, 1.0, 2.0])
    2.0
    >>> times = time_it(lambda: sum(range(1000)), repeat=5)
    >>> len(times), all(t > 0 for t in times)
    (5, True)
"""
from __future__ import annotations

import time
from typing import Callable, Iterable


def median(xs: Iterable, key: Callable | None = None):
    """The middle item of `xs` (by `key` if given; the upper middle for an even count).

    >>> median([4, 1, 3, 2])
    3
    >>> median([{"s": 0.3}, {"s": 0.1}, {"s": 0.2}], key=lambda r: r["s"])
    {'s': 0.2}
    """
    items = sorted(xs, key=key)
    if not items:
        raise ValueError("median of no values: time at least one run")
    return items[len(items) // 2]


def time_it(fn: Callable[[], object], repeat: int = 5, warmup: int = 1,
            sync: Callable[[], None] | None = None, before: Callable[[], object] | None = None) -> list[float]:
    """Seconds of each of `repeat` calls of fn(), after `warmup` untimed calls (JIT,
    allocations, caches). `sync` is called before and after each timed call, e.g.
    torch.cuda.synchronize, so that queued GPU work is counted. `before` is called, untimed,
    before each timed call (and before `sync`), e.g. a barrier so that every rank starts
    together, or to set up the input that fn() consumes.

    >>> calls = []
    >>> len(time_it(lambda: calls.append("fn"), repeat=2, warmup=0, before=lambda: calls.append("before")))
    2
    >>> calls
    ['before', 'fn', 'before', 'fn']

    >>> time_it(lambda: None, repeat=0)
    Traceback (most recent call last):
    ...
    ValueError: repeat must be an int >= 1, got 0
    """
    for name, v, low in (("repeat", repeat, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if before:
            before()
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return times


def codec_seconds(compressor, numel: int, repeats: int = 5, seed: int = 0) -> float:
    """Median seconds to compress and decompress a random `numel`-entry gradient here.

    >>> from milktea import TopK
    >>> codec_seconds(TopK(0.01), 10_000, repeats=3) > 0
    True
    """
    import torch

    from .checks import check_positive_int
    check_positive_int(numel, "numel")
    x = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    return median(time_it(lambda: compressor.decompress(compressor.compress(x)), repeat=repeats))
