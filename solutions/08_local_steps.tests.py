"""Tests of exercise 08 (local steps): the outer Nesterov step, bytes per token, a report
with its ledger, the quorum's token-weighted mean."""
import functools

import numpy as np

from milktea.i18n import N_
from milktea.grade.spec import Case, Task, array, number, several


def _outer_cases(rng, ref, hidden=False):
    theta = np.array([1.0, 2.0, 3.0])
    delta = np.array([0.0, -0.5, 1.0])
    fixed = [] if hidden else [
        Case(N_("the first outer step: no buffer yet"), (theta, delta, None, 0.7, 0.9)),
        Case(N_("lr 1, no momentum: the plain average"), (theta, delta, None, 1.0, 0.0)),
        Case(N_("a later step: the buffer carries the trend"), (theta, delta, np.array([0.5, 0.5, -1.0]), 0.7, 0.9)),
        Case(N_("momentum without Nesterov's look-ahead would differ here"),
             (np.zeros(4, np.float32), np.ones(4, np.float32), np.full(4, 2.0, np.float32), 1.0, 0.5))]
    rand = []
    for _draw in range(5):
        n = int(rng.integers(1, 2000 if hidden else 100))
        dt = rng.choice([np.float32, np.float64])
        buffer = None if rng.random() < 0.3 else rng.standard_normal(n).astype(dt)
        rand.append(Case(N_("random parameters, pseudo-gradient and buffer"),
                         (rng.standard_normal(n).astype(dt), (0.1 * rng.standard_normal(n)).astype(dt), buffer,
                          float(rng.uniform(0.1, 1.5)), float(rng.choice([0.0, 0.5, 0.9, 0.99])))))
    return fixed + rand


def _bytes_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("DDP: fp32 every step"), (1e9, 1, 4096, 32, 1.0, 0)),
        Case(N_("INTELLECT-1: H = 100, int8"), (10e9, 100, 8192, 8, 1.0, 0)),
        Case(N_("a dense report lists no positions"), (1e6, 10, 256, 8, 1.0, 4)),
        Case(N_("SparseLoCo: 2% kept, 2-bit values, 1-byte positions"), (1e9, 10, 4096, 2, 0.02, 1))]
    rand = [Case(N_("random scheme"), (float(rng.integers(1_000, 10**10 if hidden else 10**8)), int(rng.integers(1, 1000)),
                                      int(rng.integers(1, 10**5)), int(rng.choice([1, 2, 4, 8, 16, 32])),
                                      float(rng.choice([1.0, rng.uniform(0.001, 0.5)])), int(rng.integers(0, 5))))
            for _draw in range(6)]
    return fixed + rand


def _report_cases(rng, ref, hidden=False):
    g = np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    fixed = [] if hidden else [
        Case(N_("the first week: an empty ledger"), (g, np.array([0.2, 1.1, 0.9, 1.6, 1.0]), np.zeros(5), 2)),
        Case(N_("the ledger decides what is sent"), (g, np.array([0.9, 1.0, 1.1, 1.0, 1.0]), np.array([0, 3.0, 0, -2.0, 0]), 1)),
        Case(N_("a negative change is among the largest"), (g, np.array([1.0, 4.0, 1.5, 0.5, 1.0]), np.zeros(5), 1)),
        Case(N_("k = n: everything is sent, the ledger empties"), (g, g * 0.5, np.full(5, 0.25), 5)),
        Case(N_("a 2-D float32 model"), (rng.standard_normal((3, 4)).astype(np.float32),
                                          rng.standard_normal((3, 4)).astype(np.float32),
                                          (0.1 * rng.standard_normal((3, 4))).astype(np.float32), 4))]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(2, 3000 if hidden else 200))
        dt = rng.choice([np.float32, np.float64])
        rand.append(Case(N_("random parameters and ledger"), (rng.standard_normal(n).astype(dt),
                                                              rng.standard_normal(n).astype(dt),
                                                              (0.5 * rng.standard_normal(n)).astype(dt),
                                                              int(rng.integers(1, n + 1)))))
    return fixed + rand


def _quorum_cases(rng, ref, hidden=False):
    reports = np.array([[1.0, 0.0], [4.0, 3.0], [100.0, 100.0]])
    fixed = [] if hidden else [
        Case(N_("every branch open, equal tokens: the plain mean"), (reports, [10, 10, 10], [True, True, True])),
        Case(N_("a closed branch's report is ignored"), (reports, [1000, 2000, 500], [True, True, False])),
        Case(N_("tokens weigh the open branches"), (reports, [1, 3, 7], [True, True, False])),
        Case(N_("only one branch open"), (reports, [5, 5, 5], [False, False, True]))]
    rand = []
    for _draw in range(5):
        w, n = int(rng.integers(1, 64 if hidden else 9)), int(rng.integers(1, 2000 if hidden else 50))
        is_open = rng.random(w) < 0.7
        is_open[int(rng.integers(0, w))] = True
        rand.append(Case(N_("random quorum"), (rng.standard_normal((w, n)), rng.integers(1, 10_000, size=w),
                                              is_open)))
    return fixed + rand


_close = dict(rtol=1e-6, atol=1e-6)
TASKS = [
    Task("08.1", "outer_step", 3, _outer_cases,
         several(array(same_dtype_as=0, **_close), array(same_dtype_as=0, **_close),
                 names=("new_theta", "new_buffer"))),
    Task("08.2", "bytes_per_token", 2, _bytes_cases, number(rtol=1e-9)),
    Task("08.3", "report_with_ledger", 3, _report_cases,
         several(array(same_dtype_as=0, **_close), array(same_dtype_as=0, **_close), names=("sent", "new_ledger"))),
    Task("08.4", "quorum_mean", 2, _quorum_cases, array(dtype=np.float64, rtol=1e-9, atol=1e-12)),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "08.1": functools.partial(_outer_cases, hidden=True),
    "08.2": functools.partial(_bytes_cases, hidden=True),
    "08.3": functools.partial(_report_cases, hidden=True),
    "08.4": functools.partial(_quorum_cases, hidden=True),
}
### END HIDDEN TESTS
