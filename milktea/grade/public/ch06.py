"""Public tests of exercise 06 (engineering): 1-byte delta indices (delta8), the overlap timeline."""
import numpy as np

from ..spec import Case, Task, array, byte_array, number, show


def _index_sets(rng, ref):
    fixed = [Case("no indices", (np.zeros(0, np.int64),)),
             Case("index 0 alone", (np.array([0]),)),
             Case("neighbours: gaps of 0", (np.array([0, 1, 2, 3]),)),
             Case("gap 254 fits a byte, gap 255 needs an escape", (np.array([254, 510, 1020]),)),
             Case("a gap of exactly 2 x 255", (np.array([5, 516]),)),
             Case("int32 positions with a big gap", (np.array([300, 301, 100_000], np.int32),))]
    rand = []
    for _ in range(4):
        n = int(rng.integers(10, 10**6))
        k = int(rng.integers(1, min(n, 3000)))
        rand.append(Case("random Top-K indices", (np.sort(rng.choice(n, k, replace=False)).astype(np.int64),)))
    return fixed + rand


def _decode_cases(rng, ref):
    return [Case(c.label, (np.asarray(ref["delta_encode"](c.args[0]), np.uint8),)) for c in _index_sets(rng, ref)]


def _decode_compare(expected, got, args):
    if isinstance(got, np.ndarray) and got.dtype.kind not in "iu" and got.size:
        return f"expected integer indices, got dtype {got.dtype}"
    if isinstance(got, list):
        got = np.asarray(got, np.int64) if all(isinstance(v, int) for v in got) else got
    if not isinstance(got, np.ndarray):
        return f"expected a numpy array of indices, got {show(got)}"
    return array()(expected, got.astype(np.int64), args)


def _timelines(rng, ref):
    fixed = [Case("one bucket: nothing to overlap", (np.array([0.3]), np.array([0.2]))),
             Case("fast link: all but the last call hide behind work", (np.full(4, 0.1), np.full(4, 0.01))),
             Case("slow link: calls queue up", (np.full(4, 0.01), np.full(4, 0.1))),
             Case("uneven buckets", (np.array([0.05, 0.2, 0.01, 0.1]), np.array([0.15, 0.02, 0.3, 0.0])))]
    rand = []
    for _ in range(4):
        b = int(rng.integers(1, 40))
        rand.append(Case("random buckets", (rng.uniform(0, 0.1, b), rng.uniform(0, 0.1, b) * rng.uniform(0.1, 5))))
    return fixed + rand


def _step_cases(rng, ref):
    cases = []
    for c in _timelines(rng, ref):
        for overlap in (False, True):
            cases.append(Case(c.label + (" (overlapped)" if overlap else " (in series)"),
                              (0.05, c.args[0], c.args[1], overlap)))
    return cases


TASKS = [
    Task("06.1", "delta_encode", 3, "1-byte delta indices with escapes",
         _index_sets, byte_array(), ("indices",)),
    Task("06.2", "delta_decode", 2, "reading the deltas back",
         _decode_cases, _decode_compare, ("data",)),
    Task("06.3", "overlap_timeline", 3, "phoning while working: the bucket timeline",
         _timelines, array(rtol=1e-9, atol=1e-12), ("backward_s", "comm_s")),
    Task("06.4", "step_time", 2, "one step, in series or overlapped",
         _step_cases, number(rtol=1e-9, atol=1e-12), ("forward_s", "backward_s", "comm_s", "overlap")),
]
