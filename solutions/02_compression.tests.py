"""Tests of exercise 02 (compress the report): ratio from real bytes, error, speed-up, break-even,
all-gather against the ring, and which collective wins."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, number, several, show

DTYPES = (np.float16, np.float32, np.float64, np.int32, np.uint8, np.int8)


def _part(rng, big=False):
    n = int(rng.integers(1, 500 if big else 60))
    if rng.random() < 0.25:
        return bytes(rng.integers(0, 256, n, dtype=np.uint8))
    return rng.standard_normal(n).astype(rng.choice(DTYPES))


def _ratio_cases(rng, ref, hidden=False):
    g = rng.standard_normal(1000).astype(np.float32)
    fixed = [] if hidden else [Case(N_("Top-10%: int32 indices + float32 values"), (g, [np.arange(100, dtype=np.int32), g[:100]])),
             Case(N_("fp16 copy of an fp32 gradient"), (g, [g.astype(np.float16)])),
             Case(N_("a 2-D float64 gradient sent as 40 raw bytes"), (np.zeros((10, 10)), [bytes(40)])),
             Case(N_("uint8 indices, float16 values and a header"), (g, [np.zeros(50, np.uint8), np.zeros(50, np.float16),
                                                                  b"hdr!"]))]
    rand = [Case(N_("random gradient and packet"), (rng.standard_normal(rng.integers(1, 20, size=2)).astype(
        rng.choice([np.float16, np.float32, np.float64])), [_part(rng, hidden) for _draw in range(int(rng.integers(1, 4)))]))
        for _draw in range(4)]
    return fixed + rand


def _error_cases(rng, ref, hidden=False):
    g = rng.standard_normal(64).astype(np.float32)
    fixed = [] if hidden else [Case(N_("a perfect copy"), (g, g.copy())),
             Case(N_("nothing sent at all"), (g, np.zeros_like(g))),
             Case(N_("the sign flipped"), (g, -g)),
             Case(N_("an fp16 round trip, 2-D"), (g.reshape(8, 8), g.reshape(8, 8).astype(np.float16)))]
    rand = []
    for _draw in range(4):
        x = rng.standard_normal(int(rng.integers(2, 2000 if hidden else 200)))
        rand.append(Case(N_("random gradient and approximation"), (x, x + rng.standard_normal(x.size) * rng.uniform(0, 1))))
    return fixed + rand


def _speedup_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("0.2 s of work, 3 s on the phone, R = 8"), (0.2, 3.0, 8.0, 0.0)),
             Case(N_("R = 1 and free coding: no change"), (1.0, 1.0, 1.0, 0.0)),
             Case(N_("coding costs more than it saves"), (0.5, 0.2, 4.0, 0.3))]
    rand = [Case(N_("random step"), (float(rng.uniform(0, 2)), float(rng.uniform(0.01, 5)), float(rng.uniform(1, 1000)),
                                 float(rng.uniform(0, 0.5)))) for _draw in range(4)]
    return fixed + rand


def _break_even_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("free coding: any R >= 1 helps"), (0.2, 3.0, 0.0)),
             Case(N_("coding slower than the call itself"), (0.2, 1.0, 1.5)),
             Case(N_("coding exactly as slow as the call"), (0.2, 1.0, 1.0)),
             Case(N_("0.5 s of coding against 3 s on the phone"), (0.2, 3.0, 0.5))]
    rand = [Case(N_("random step"), (float(rng.uniform(0, 2)), float(rng.uniform(0.5, 5)), float(rng.uniform(0, 0.5))))
            for _draw in range(4)]
    return fixed + rand


def _gather_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("the chapter's 1.6 GB, R = 8, 64 workers on 25 Gbit/s"), (1.6e9, 8.0, 64, 50e-6, 25e9 / 8)),
             Case(N_("no latency: break-even at N / 2"), (1e8, 4.0, 16, 0.0, 1.25e9)),
             Case(N_("two workers"), (4e6, 2.0, 2, 1e-5, 1e9)),
             Case(N_("latency dominates: a tiny gradient"), (1e3, 100.0, 32, 1e-4, 1.25e10))]
    rand = [Case(N_("random cluster"), (float(rng.uniform(1e3, 1e10)), float(rng.uniform(1, 1000)), int(rng.integers(2, 512)),
                                    float(rng.uniform(0, 1e-3)), float(rng.uniform(1e8, 5e10)))) for _draw in range(4)]
    return fixed + rand


COLLECTIVES = ("allreduce", "allgather", "compressed_allreduce")


def _clear(ref, args):
    """True when nudging every price by a millionth, either way, leaves the same winner: so a
    learner's order of operations cannot decide the answer."""
    nbytes, ratio, workers, alpha, bandwidth, codec_s = args
    winner = ref["best_collective"](*args)[0]
    for e in (1 - 1e-6, 1 + 1e-6):
        for nudged in ((nbytes * e, ratio, workers, alpha, bandwidth, codec_s), (nbytes, ratio * e, workers, alpha, bandwidth, codec_s),
                       (nbytes, ratio, workers, alpha * e, bandwidth, codec_s), (nbytes, ratio, workers, alpha, bandwidth, codec_s * e)):
            if ref["best_collective"](*nudged)[0] != winner:
                return False
    return True


def _collective_cases(rng, ref, hidden=False):
    link = 25e9 / 8
    fixed = [] if hidden else [
        Case(N_("1.6 GB, R = 32, 8 workers, a cheap codec"), (1.6e9, 32.0, 8, 50e-6, link, 0.005)),
        Case(N_("the same on 2 workers"), (1.6e9, 32.0, 2, 50e-6, link, 0.005)),
        Case(N_("a slow codec on 64 workers"), (1.6e9, 8.0, 64, 50e-6, link, 0.5)),
        Case(N_("a tiny gradient: latency decides"), (4e4, 32.0, 64, 50e-6, link, 0.0)),
        Case(N_("one worker: nothing to send, nothing to code"), (1e8, 4.0, 1, 1e-5, 1e9, 0.01))]
    rand = []
    while len(rand) < (8 if hidden else 5):
        n = int(rng.integers(2, 1025 if hidden else 257))
        m, r = float(10 ** rng.uniform(3, 10)), float(10 ** rng.uniform(0.3, 3))
        alpha, bandwidth = float(10 ** rng.uniform(-7, -3)), float(10 ** rng.uniform(8, 10.7))
        codec = float(rng.uniform(0, 3) * m / bandwidth) if rng.random() < 0.8 else 0.0
        args = (m, r, n, alpha, bandwidth, codec)
        if _clear(ref, args):
            rand.append(Case(N_("random cluster and compressor"), args))
    return fixed + rand


def _collective_compare(expected, got, args):
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        return _("expected a tuple (name, seconds), got {v}").format(v=show(got))
    name, seconds = got
    if not isinstance(name, str) or name not in COLLECTIVES:
        return _("the name must be one of {names}, got {v}").format(names=", ".join(map(repr, COLLECTIVES)), v=show(name))
    if name != expected[0]:
        return _("expected {want!r} to win, got {name!r}").format(want=expected[0], name=name)
    problem = number(rtol=1e-9, atol=1e-15)(expected[1], seconds, args)
    return _("seconds: {problem}").format(problem=problem) if problem else None


TASKS = [
    Task("02.1", "compression_ratio", 2, _ratio_cases, number(rtol=1e-9)),
    Task("02.2", "relative_error", 2, _error_cases, number(rtol=1e-6, atol=1e-9)),
    Task("02.3", "speedup", 2, _speedup_cases, number(rtol=1e-9)),
    Task("02.4", "break_even_ratio", 2, _break_even_cases, number(rtol=1e-9)),
    Task("02.5", "allgather_vs_ring", 3, _gather_cases,
         several(number(rtol=1e-9, atol=1e-15), number(rtol=1e-9, atol=1e-15), number(rtol=1e-9),
                 names=("t_ring", "t_gather", "break_even"))),
    Task("02.6", "best_collective", 3, _collective_cases, _collective_compare),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "02.1": functools.partial(_ratio_cases, hidden=True),
    "02.2": functools.partial(_error_cases, hidden=True),
    "02.3": functools.partial(_speedup_cases, hidden=True),
    "02.4": functools.partial(_break_even_cases, hidden=True),
    "02.5": functools.partial(_gather_cases, hidden=True),
    "02.6": functools.partial(_collective_cases, hidden=True),
}
### END HIDDEN TESTS
