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


def time_together(fns: dict, repeat: int = 7, warmup: int = 2) -> dict:
    """{name: [seconds of each of `repeat` calls]} for several functions timed side by side:
    each first called `warmup` times untimed (JIT, allocations, caches: a first call can take
    several times a warm one), then called in rounds, one call of each per round, the order
    turning by one each round. A change of load on the machine then falls on all of them
    alike, instead of on whichever happened to be timed last, and none is always timed right
    after the same neighbour.

    >>> t = time_together({"sum": lambda: sum(range(1000)), "max": lambda: max(range(1000))}, repeat=3)
    >>> sorted(t), [len(v) for v in t.values()]
    (['max', 'sum'], [3, 3])
    """
    if not fns:
        raise ValueError("time_together needs at least one function to time")
    for name, v, low in (("repeat", repeat, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v}")
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times = {name: [] for name in names}
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def codec_times(compressors: dict, numel: int, repeats: int = 7, warmup: int = 2, seed: int = 0) -> dict:
    """{name: [seconds to compress and decompress a random `numel`-entry gradient, per
    repeat]} for several compressors timed side by side (`time_together`: warmed up first,
    then in turns). Take the median for a codec's time and the spread for its noise.

    >>> from milktea import Quantize
    >>> t = codec_times({"int8": Quantize(8), "int4": Quantize(4)}, 10_000, repeats=3)
    >>> [len(v) for v in t.values()]
    [3, 3]
    """
    import torch

    from .checks import check_positive_int
    check_positive_int(numel, "numel")
    x = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    return time_together({name: (lambda c=c: c.decompress(c.compress(x))) for name, c in compressors.items()},
                         repeat=repeats, warmup=warmup)


def codec_seconds(compressor, numel: int, repeats: int = 5, seed: int = 0) -> float:
    """Median seconds to compress and decompress a random `numel`-entry gradient here,
    after two untimed warm-up calls.

    >>> from milktea import TopK
    >>> codec_seconds(TopK(0.01), 10_000, repeats=3) > 0
    True
    """
    return median(codec_times({"codec": compressor}, numel, repeats, seed=seed)["codec"])
