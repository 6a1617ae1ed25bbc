"""Tests of exercise 04 (error feedback): one step, a run, the quadratic demo, a buggy training loop to
fix, one step of DGC with momentum correction, and EF21's estimates."""
import functools

import numpy as np

from milktea.i18n import N_
from milktea.grade.spec import Case, Task, array, several


def _step_cases(rng, ref, hidden=False):
    g = np.array([0.1, -3.0, 0.2, 0.05, 2.0, -0.3], np.float32)
    fixed = [] if hidden else [Case(N_("the first day: an empty ledger"), (g, np.zeros_like(g), 2)),
             Case(N_("old debts outweigh today's changes"), (g, np.array([4.0, 0, 0, 0, 0, -5], np.float32), 2)),
             Case(N_("k = n: everything is sent, the ledger empties"), (g, np.full_like(g, 0.5), 6)),
             Case(N_("a 2-D float64 gradient"), (rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), 3))]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(2, 3000 if hidden else 200))
        dt = rng.choice([np.float32, np.float64])
        rand.append(Case(N_("random gradient and ledger"), (rng.standard_normal(n).astype(dt),
                                                         (rng.standard_normal(n) * 0.5).astype(dt),
                                                         int(rng.integers(1, n + 1)))))
    return fixed + rand


def _run_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("one day only"), (np.array([[1.0, -2.0, 0.5]]), 1)),
             Case(N_("a small change that waits its turn"), (np.array([[1.0, 0.4], [1.0, 0.4], [1.0, 0.4]]), 1)),
             Case(N_("k = n: nothing is ever owed"), (rng.standard_normal((5, 4)), 4))]
    rand = [Case(N_("random days"), (rng.standard_normal((int(rng.integers(1, 30 if hidden else 10)), n)), int(rng.integers(1, n + 1))))
            for n in rng.integers(2, 400 if hidden else 60, size=4)]
    return fixed + rand


def _train_cases(rng, ref, hidden=False):
    target = np.random.default_rng(0).standard_normal(200)
    fixed = [] if hidden else [Case(N_("the shop's demo with the ledger"), (target, 20, 0.1, 60, True)),
             Case(N_("the same without the ledger"), (target, 20, 0.1, 60, False)),
             Case(N_("k = n: plain gradient descent"), (target[:10], 10, 0.5, 5, True)),
             Case(N_("zero steps"), (target[:10], 2, 0.1, 0, True))]
    rand = []
    for feedback in (True, False, True, False):
        n = int(rng.integers(5, 300))
        rand.append(Case(N_("random target"), (rng.standard_normal(n), int(rng.integers(1, n + 1)),
                                           float(rng.uniform(0.01, 0.9)), int(rng.integers(1, 80)), feedback)))
    return fixed + rand



def _targets(rng, workers, n):
    return rng.standard_normal((workers, n)) + rng.standard_normal(n)   # shops that share a common aim


def _fix_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("3 shops, Top-2 of 6, 40 steps"), (_targets(np.random.default_rng(1), 3, 6), 2, 0.1, 40)),
        Case(N_("2 shops, Top-1 of 4: the ledger must carry old debts"), (np.array([[1.0, 0.3, -0.2, 0.1],
                                                                                   [0.6, -0.4, 0.2, 0.3]]), 1, 0.2, 12)),
        Case(N_("k = n: every shop sends everything"), (_targets(np.random.default_rng(2), 4, 5), 5, 0.3, 10)),
        Case(N_("zero steps"), (_targets(np.random.default_rng(3), 2, 3), 1, 0.1, 0))]
    rand = []
    for _draw in range(4):
        workers, n = int(rng.integers(2, 9)), int(rng.integers(2, 400 if hidden else 60))
        rand.append(Case(N_("random shops"), (_targets(rng, workers, n), int(rng.integers(1, n + 1)),
                                              float(rng.uniform(0.01, 0.4)), int(rng.integers(1, 80 if hidden else 40)))))
    return fixed + rand


def _dgc_cases(rng, ref, hidden=False):
    def state(r, workers, n, scale=1.0):
        return (r.standard_normal(n), r.standard_normal((workers, n)) * scale, r.standard_normal((workers, n)) * 0.5 * scale,
                r.standard_normal((workers, n)) * 0.3 * scale)
    g = np.array([[0.5, -2.0, 0.1, 1.0], [0.2, 0.3, -0.4, 1.5]])
    r1 = np.random.default_rng(11)
    w0, g0, _velocity, ledger0 = state(r1, 3, 8)
    fixed = [] if hidden else [
        Case(N_("the first step: no momentum and an empty ledger yet"), (np.zeros(4), g, np.zeros_like(g), np.zeros_like(g), 1, 0.1, 0.9)),
        Case(N_("the momentum of a waiting entry keeps growing"), (np.ones(4), g, np.array([[0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
                                                                   np.array([[0.0, 0.0, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]]), 1, 0.1, 0.9)),
        Case(N_("momentum 0: Top-K with a ledger"), (w0, g0, np.zeros((3, 8)), ledger0, 3, 0.05, 0.0)),
        Case(N_("one worker, a 10-entry layer"), (*state(r1, 1, 10), 2, 0.1, 0.9))]
    rand = []
    for _draw in range(4):
        workers, n = int(rng.integers(1, 9)), int(rng.integers(2, 500 if hidden else 50))
        w, grads, velocity, ledger = state(rng, workers, n, float(rng.uniform(0.01, 10)))
        rand.append(Case(N_("random workers, momentum and ledgers"), (w, grads, velocity, ledger, int(rng.integers(1, n + 1)),
                                                                       float(rng.uniform(0.001, 0.5)), float(rng.uniform(0, 0.99)))))
    return fixed + rand


def _ef21_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("one step: the first packets are the Top-K of the gradients"), (np.array([[1.0, 0.3, -0.2, 0.1],
                                                                                       [0.6, -0.4, 0.2, 0.3]]), 1, 0.2, 1)),
        Case(N_("2 shops, Top-1 of 4: the estimates fill in over the steps"), (np.array([[1.0, 0.3, -0.2, 0.1],
                                                                                        [0.6, -0.4, 0.2, 0.3]]), 1, 0.2, 12)),
        Case(N_("3 shops, Top-2 of 6, 30 steps"), (_targets(np.random.default_rng(4), 3, 6), 2, 0.1, 30)),
        Case(N_("k = n: the estimates are the gradients"), (_targets(np.random.default_rng(5), 4, 5), 5, 0.3, 6)),
        Case(N_("zero steps"), (_targets(np.random.default_rng(6), 2, 3), 1, 0.1, 0))]
    rand = []
    for _draw in range(4):
        workers, n = int(rng.integers(1, 9)), int(rng.integers(2, 400 if hidden else 60))
        rand.append(Case(N_("random shops"), (_targets(rng, workers, n), int(rng.integers(1, n + 1)),
                                              float(rng.uniform(0.01, 0.3)), int(rng.integers(1, 60 if hidden else 25)))))
    return fixed + rand


_close = dict(rtol=1e-6, atol=1e-6)
TASKS = [
    Task("04.1", "ef_step", 3, _step_cases,
         several(array(same_dtype_as=0, **_close), array(same_dtype_as=0, **_close), names=("sent", "new_residual"))),
    Task("04.2", "ef_run", 2, _run_cases,
         several(array(rtol=1e-9, atol=1e-9), array(rtol=1e-9, atol=1e-9), names=("total_sent", "residual"))),
    Task("04.3", "train_quadratic", 3, _train_cases, array(rtol=1e-6, atol=1e-8)),
    Task("04.4", "ef_train", 3, _fix_cases, array(rtol=1e-6, atol=1e-9)),
    Task("04.5", "dgc_step", 3, _dgc_cases,
         several(array(rtol=1e-9, atol=1e-12), array(rtol=1e-9, atol=1e-12), array(rtol=1e-9, atol=1e-12),
                 names=("w", "velocity", "ledger"))),
    Task("04.6", "ef21_train", 3, _ef21_cases,
         several(array(rtol=1e-6, atol=1e-9), array(rtol=1e-6, atol=1e-9), names=("w", "estimates"))),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "04.1": functools.partial(_step_cases, hidden=True),
    "04.2": functools.partial(_run_cases, hidden=True),
    "04.3": functools.partial(_train_cases, hidden=True),
    "04.4": functools.partial(_fix_cases, hidden=True),
    "04.5": functools.partial(_dgc_cases, hidden=True),
    "04.6": functools.partial(_ef21_cases, hidden=True),
}
### END HIDDEN TESTS
