"""Public tests of exercise 03 (Top-K): threshold, sparsify, pack, unpack."""
import numpy as np

from ...i18n import N_
from ..spec import Case, Task, array, number, several


def _inputs(rng, ref):
    fixed = [Case("k = 1: only the biggest change", (np.array([3.0, -5.0, 1.0, 4.0], np.float32), 1)),
             Case("k = n: keep everything", (np.array([0.5, -0.25, 2.0, -1.0, 0.125], np.float32), 5)),
             Case("ties: equal magnitudes at the threshold", (np.array([2.0, -2.0, 2.0, 1.0, -0.5], np.float32), 2)),
             Case("a 2-D gradient (rows of a weight matrix)", (np.arange(-6, 6, dtype=np.float64).reshape(3, 4), 5)),
             Case("zeros in the gradient, k larger than the non-zeros", (np.array([0.0, 3.0, 0.0, -1.0], np.float32), 3))]
    rand = []
    for _ in range(4):
        shape = tuple(int(s) for s in rng.integers(1, 60, size=int(rng.integers(1, 3))))
        x = rng.standard_normal(shape).astype(rng.choice([np.float32, np.float64]))
        rand.append(Case("random gradient", (x, int(rng.integers(1, x.size + 1)))))
    return fixed + rand


def _unpack_cases(rng, ref):
    cases = []
    for c in _inputs(rng, ref):
        x, k = c.args
        idx, vals = ref["topk_pack"](x, k)
        cases.append(Case(c.label, (idx, vals, tuple(x.shape))))
    return cases


TASKS = [
    Task("03.1", "topk_threshold", 2, N_("the Top-K threshold (the K-th largest magnitude)"),
         _inputs, number(rtol=1e-6), ("x", "k")),
    Task("03.2", "topk_sparsify", 2, N_("keep the K biggest changes, zero the rest"),
         _inputs, array(same_dtype_as=0), ("x", "k")),
    Task("03.3", "topk_pack", 2, N_("what goes on the wire: indices and values"),
         _inputs, several(array(dtype=np.int32), array(same_dtype_as=0), names=("indices", "values")), ("x", "k")),
    Task("03.4", "topk_unpack", 2, N_("head office rebuilds the full report"),
         _unpack_cases, array(same_dtype_as=1), ("indices", "values", "shape")),
]
