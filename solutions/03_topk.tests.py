"""Tests of exercise 03 (Top-K): threshold, sparsify, pack, unpack, and how many entries carry a share
of the energy."""
import functools

import numpy as np

from milktea.i18n import N_
from milktea.grade.spec import Case, Task, array, number, several


def _inputs(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("k = 1: only the biggest change"), (np.array([3.0, -5.0, 1.0, 4.0], np.float32), 1)),
             Case(N_("k = n: keep everything"), (np.array([0.5, -0.25, 2.0, -1.0, 0.125], np.float32), 5)),
             Case(N_("ties: equal magnitudes at the threshold"), (np.array([2.0, -2.0, 2.0, 1.0, -0.5], np.float32), 2)),
             Case(N_("a 2-D gradient (rows of a weight matrix)"), (np.arange(-6, 6, dtype=np.float64).reshape(3, 4), 5)),
             Case(N_("zeros in the gradient, k larger than the non-zeros"), (np.array([0.0, 3.0, 0.0, -1.0], np.float32), 3))]
    rand = []
    for _draw in range(4):
        shape = tuple(int(s) for s in rng.integers(1, 300 if hidden else 30, size=int(rng.integers(1, 3))))
        x = rng.standard_normal(shape).astype(rng.choice([np.float32, np.float64]))
        rand.append(Case(N_("random gradient"), (x, int(rng.integers(1, x.size + 1)))))
    return fixed + rand


def _unpack_cases(rng, ref, hidden=False):
    cases = []
    for c in _inputs(rng, ref, hidden):
        x, k = c.args
        idx, vals = ref["topk_pack"](x, k)
        cases.append(Case(c.label, (idx, vals, tuple(x.shape))))
    return cases


def _energy_cases(rng, ref, hidden=False):
    spike = np.full(100, 0.1, np.float32)
    spike[37] = 3.0
    fixed = [] if hidden else [
        Case(N_("one entry holds most of the energy"), (spike, 0.9)),
        Case(N_("a flat gradient: the share of energy is the share of entries"), (np.full(10, -0.5), 0.55)),
        Case(N_("all of the energy: every non-zero entry"), (np.array([0.0, 2.0, 0.0, -1.0, 0.5]), 1.0)),
        Case(N_("a 2-D gradient"), (np.arange(-6, 6, dtype=np.float32).reshape(3, 4), 0.75)),
        Case(N_("Gaussian entries, a share of 0.9 of the energy"), (np.random.default_rng(5).standard_normal(1000), 0.9)),
        Case(N_("heavy tails, a share of 0.9 of the energy"), (np.random.default_rng(6).standard_t(1.5, 1000), 0.9))]
    rand = []
    while len(rand) < 4:
        n = int(rng.integers(1, 20_000 if hidden else 300))
        x = rng.standard_t(float(rng.uniform(1, 10)), n) if rng.random() < 0.5 else rng.standard_normal(n)
        x, share = x.astype(rng.choice([np.float32, np.float64])), float(rng.uniform(0.05, 0.999))
        # a share a hair either way gives the same k: float rounding cannot decide the answer
        if len({ref["k_for_energy"](x, share * e) for e in (1 - 1e-9, 1, 1 + 1e-9)}) == 1:
            rand.append(Case(N_("random gradient and share"), (x, share)))
    return fixed + rand


TASKS = [
    Task("03.1", "topk_threshold", 2, _inputs, number(rtol=1e-6)),
    Task("03.2", "topk_sparsify", 2, _inputs, array(same_dtype_as=0)),
    Task("03.3", "topk_pack", 2, _inputs,
         several(array(dtype=np.int32), array(same_dtype_as=0), names=("indices", "values"))),
    Task("03.4", "topk_unpack", 2, _unpack_cases, array(same_dtype_as=1)),
    Task("03.5", "k_for_energy", 2, _energy_cases, number(rtol=0, atol=0)),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "03.1": functools.partial(_inputs, hidden=True),
    "03.2": functools.partial(_inputs, hidden=True),
    "03.3": functools.partial(_inputs, hidden=True),
    "03.4": functools.partial(_unpack_cases, hidden=True),
    "03.5": functools.partial(_energy_cases, hidden=True),
}
### END HIDDEN TESTS
