"""Tests of exercise 03 (Top-K): the threshold, which entries survive, a packet head office can read, a
matrix rebuilt, how many entries carry a share of the energy, and an unbiased Random-K (checked by its
statistics)."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, number, several, show


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


# Random-K: the grader's harness calls the learner's randk DRAWS times on the same x with one
# Generator, and sends back only (the most non-zero entries in one draw, the squared bias of the
# draws' mean in units of its own sampling noise, the degrees of freedom of that noise): any
# unbiased sparsifier with at most k non-zeros passes, whatever way it chooses them, and the
# reference's numbers (k, about 1, a count) tell a reader of the public checks nothing about how
# to scale. Every case keeps k >= n/8, so that each entry is kept about 50 times in 400 draws.
RANDK_HARNESS = """
import numpy as np

_rng, _asarray, _isfinite, _zeros, _count = np.random.default_rng, np.asarray, np.isfinite, np.zeros, np.count_nonzero
_maximum, _f64 = np.maximum, np.float64


def run(randk, x, k, seed, draws=400):
    x = _asarray(x, dtype=_f64)
    rng, total, squares, most = _rng(seed), _zeros(x.shape), _zeros(x.shape), 0
    for _ in range(draws):
        r = _asarray(randk(x.copy(), k, rng), dtype=_f64)
        if r.shape != x.shape:
            raise ValueError("randk must return an array of the shape of x, " + str(x.shape) + ", got " + str(r.shape))
        if not _isfinite(r).all():
            raise ValueError("randk returned a value that is not finite")
        most = max(most, int(_count(r)))
        total += r
        squares += r * r
    mean = total / draws
    var = _maximum(squares / draws - mean * mean, 0.0)          # each entry's variance in one draw
    bias2, noise2 = float(((mean - x) ** 2).sum()), float(var.sum()) / draws
    if bias2 <= 1e-20 * float((x * x).sum()) + 1e-300:
        return most, 0.0, 1.0
    if noise2 <= 0:
        return most, float("inf"), 1.0
    # the squared bias of an unbiased sparsifier's mean is about noise2 times a chi-square of
    # `dof` degrees of freedom over dof, dof counting the entries whose noise weighs
    return most, bias2 / noise2, float(var.sum()) ** 2 / float((var * var).sum())
"""


def _randk_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("a quarter of 48 Gaussian entries"), (np.random.default_rng(7).standard_normal(48), 12), {"seed": 1}),
        Case(N_("k = 1 of 8"), (np.array([0.5, -1.0, 2.0, 0.25, -0.75, 1.5, -3.0, 1.0]), 1), {"seed": 2}),
        Case(N_("k = n: keep everything"), (np.array([1.0, -2.0, 3.0]), 3), {"seed": 3}),
        Case(N_("most of the entries kept"), (np.random.default_rng(8).standard_normal(10), 9), {"seed": 4}),
        Case(N_("a spike among small entries, with zeros"), (np.r_[40.0, np.zeros(5), np.full(14, 0.5)], 5), {"seed": 5})]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(2, 300 if hidden else 64))
        x = rng.standard_normal(n) * float(10 ** rng.uniform(-3, 2))
        k = int(rng.integers(-(-n // 8), n + 1))
        rand.append(Case(N_("random gradient and k"), (x, k), {"seed": int(rng.integers(1 << 30))}))
    return fixed + rand


def _randk_compare(expected, got, args):
    k = int(args[1])
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        return _("the draws could not be read: {v}").format(v=show(got))
    most, ratio, dof = got
    if most > k:
        return _("a draw had {m} non-zero entries: at most k = {k} may travel").format(m=most, k=k)
    if ratio > 1 + 12 * np.sqrt(2 / max(float(dof), 1.0)):   # 12 standard deviations of chi2(dof) / dof
        return _("biased: over 400 draws the average misses x by {r:.0f} times what the draws' own noise "
                 "explains; an unbiased Random-K averages to x").format(r=ratio)
    return None


TASKS = [
    Task("03.1", "topk_threshold", 2, _inputs, number(rtol=1e-6)),
    Task("03.2", "topk_sparsify", 2, _inputs, array(same_dtype_as=0)),
    Task("03.3", "topk_pack", 2, _inputs,
         several(array(dtype=np.int32), array(same_dtype_as=0), names=("indices", "values"))),
    Task("03.4", "topk_unpack", 2, _unpack_cases, array(same_dtype_as=1)),
    Task("03.5", "k_for_energy", 2, _energy_cases, number(rtol=0, atol=0)),
    Task("03.6", "randk", 3, _randk_cases, _randk_compare, params=("x", "k"), harness=RANDK_HARNESS),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "03.1": functools.partial(_inputs, hidden=True),
    "03.2": functools.partial(_inputs, hidden=True),
    "03.3": functools.partial(_inputs, hidden=True),
    "03.4": functools.partial(_unpack_cases, hidden=True),
    "03.5": functools.partial(_energy_cases, hidden=True),
    "03.6": functools.partial(_randk_cases, hidden=True),
}
### END HIDDEN TESTS
