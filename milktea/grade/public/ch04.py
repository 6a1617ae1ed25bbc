"""Public tests of exercise 04 (error feedback): one step, a run, the quadratic demo."""
import numpy as np

from ...i18n import N_
from ..spec import Case, Task, array, several


def _step_cases(rng, ref):
    g = np.array([0.1, -3.0, 0.2, 0.05, 2.0, -0.3], np.float32)
    fixed = [Case("the first day: an empty ledger", (g, np.zeros_like(g), 2)),
             Case("old debts outweigh today's changes", (g, np.array([4.0, 0, 0, 0, 0, -5], np.float32), 2)),
             Case("k = n: everything is sent, the ledger empties", (g, np.full_like(g, 0.5), 6)),
             Case("a 2-D float64 gradient", (rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), 3))]
    rand = []
    for _ in range(4):
        n = int(rng.integers(2, 3000))
        dt = rng.choice([np.float32, np.float64])
        rand.append(Case("random gradient and ledger", (rng.standard_normal(n).astype(dt),
                                                         (rng.standard_normal(n) * 0.5).astype(dt),
                                                         int(rng.integers(1, n + 1)))))
    return fixed + rand


def _run_cases(rng, ref):
    fixed = [Case("one day only", (np.array([[1.0, -2.0, 0.5]]), 1)),
             Case("a small change that waits its turn", (np.array([[1.0, 0.4], [1.0, 0.4], [1.0, 0.4]]), 1)),
             Case("k = n: nothing is ever owed", (rng.standard_normal((5, 4)), 4))]
    rand = [Case("random days", (rng.standard_normal((int(rng.integers(1, 30)), n)), int(rng.integers(1, n + 1))))
            for n in rng.integers(2, 400, size=4)]
    return fixed + rand


def _train_cases(rng, ref):
    target = np.random.default_rng(0).standard_normal(200)
    fixed = [Case("the seed's demo with the ledger", (target, 20, 0.1, 60, True)),
             Case("the same without the ledger", (target, 20, 0.1, 60, False)),
             Case("k = n: plain gradient descent", (target[:10], 10, 0.5, 5, True)),
             Case("zero steps", (target[:10], 2, 0.1, 0, True))]
    rand = []
    for feedback in (True, False, True, False):
        n = int(rng.integers(5, 300))
        rand.append(Case("random target", (rng.standard_normal(n), int(rng.integers(1, n + 1)),
                                           float(rng.uniform(0.01, 0.9)), int(rng.integers(1, 80)), feedback)))
    return fixed + rand


_close = dict(rtol=1e-6, atol=1e-6)
TASKS = [
    Task("04.1", "ef_step", 3, N_("one step with the ledger"),
         _step_cases, several(array(same_dtype_as=0, **_close), array(same_dtype_as=0, **_close),
                              names=("sent", "new residual")), ("grad", "residual", "k")),
    Task("04.2", "ef_run", 2, N_("many days: nothing is lost"),
         _run_cases, several(array(rtol=1e-9, atol=1e-9), array(rtol=1e-9, atol=1e-9),
                             names=("total sent", "residual")), ("grads", "k")),
    Task("04.3", "train_quadratic", 3, N_("the shop's demo: Top-K with and without the ledger"),
         _train_cases, array(rtol=1e-6, atol=1e-8), ("target", "k", "lr", "steps", "feedback")),
]
