"""Tests of exercise 06 (engineering): 1-byte delta indices (delta8), the overlap timeline."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, byte_array, number, several, show


def _index_sets(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("no indices"), (np.zeros(0, np.int64),)),
             Case(N_("index 0 alone"), (np.array([0]),)),
             Case(N_("neighbours: gaps of 0"), (np.array([0, 1, 2, 3]),)),
             Case(N_("gap 254 fits a byte, gap 255 needs an escape"), (np.array([254, 510, 1020]),)),
             Case(N_("a gap of exactly 2 x 255"), (np.array([5, 516]),)),
             Case(N_("int32 positions with a big gap"), (np.array([300, 301, 100_000], np.int32),))]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(10, 10**6))
        k = int(rng.integers(1, min(n, 3000 if hidden else 60)))
        rand.append(Case(N_("random Top-K indices"), (np.sort(rng.choice(n, k, replace=False)).astype(np.int64),)))
    return fixed + rand


def _decode_cases(rng, ref, hidden=False):
    return [Case(c.label, (np.asarray(ref["delta_encode"](c.args[0]), np.uint8),)) for c in _index_sets(rng, ref, hidden)]


def _decode_compare(expected, got, args):
    if isinstance(got, np.ndarray) and got.dtype.kind not in "iu" and got.size:
        return _("expected integer indices, got dtype {dtype}").format(dtype=got.dtype)
    if isinstance(got, list):
        got = np.asarray(got, np.int64) if all(isinstance(v, int) for v in got) else got
    if not isinstance(got, np.ndarray):
        return _("expected a numpy array of indices, got {v}").format(v=show(got))
    return array()(expected, got.astype(np.int64), args)


def _timelines(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("one bucket: nothing to overlap"), (np.array([0.3]), np.array([0.2]))),
             Case(N_("fast link: all but the last call hide behind work"), (np.full(4, 0.1), np.full(4, 0.01))),
             Case(N_("slow link: calls queue up"), (np.full(4, 0.01), np.full(4, 0.1))),
             Case(N_("uneven buckets"), (np.array([0.05, 0.2, 0.01, 0.1]), np.array([0.15, 0.02, 0.3, 0.0])))]
    rand = []
    for _draw in range(4):
        b = int(rng.integers(1, 40))
        rand.append(Case(N_("random buckets"), (rng.uniform(0, 0.1, b), rng.uniform(0, 0.1, b) * rng.uniform(0.1, 5))))
    return fixed + rand


def _step_cases(rng, ref, hidden=False):
    cases = []
    for c in _timelines(rng, ref, hidden):
        for overlap in (False, True):
            cases.append(Case(c.label, (0.05, c.args[0], c.args[1], overlap)))   # the call shows `overlap`
    return cases


def _accumulation_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("8 micro-batches, without no_sync()"), (0.05, 0.2, 100e6, 32, 8, False)),
             Case(N_("8 micro-batches, with no_sync()"), (0.05, 0.2, 100e6, 32, 8, True)),
             Case(N_("no accumulation: no_sync() changes nothing"), (0.1, 0.3, 4e6, 16, 1, True))]
    rand = [Case(N_("random step"), (float(rng.uniform(0.001, 1)), float(rng.uniform(0, 2)), float(rng.uniform(1e3, 1e10)),
                                 int(rng.integers(1, 256)), int(rng.integers(1, 64)), bool(rng.integers(0, 2))))
            for _draw in range(6)]
    return fixed + rand


def _power_cases(rng, ref, hidden=False):
    u, v = rng.standard_normal(7), rng.standard_normal(5)
    fixed = [] if hidden else [Case(N_("a rank-1 matrix is rebuilt exactly at rank 1"), (np.outer(u, v), rng.standard_normal((5, 1)))),
             Case(N_("rank 2 of a 6 x 4 matrix"), (rng.standard_normal((6, 4)), rng.standard_normal((4, 2)))),
             Case(N_("full rank: the matrix itself"), (rng.standard_normal((3, 3)), rng.standard_normal((3, 3)))),
             Case(N_("a tall gradient, rank 4"), (rng.standard_normal((64, 16)) * 0.01, rng.standard_normal((16, 4))))]
    rand = []
    for _draw in range(4):
        m, n = int(rng.integers(2, 80 if hidden else 20)), int(rng.integers(2, 80 if hidden else 20))
        r = int(rng.integers(1, min(m, n) + 1))
        rand.append(Case(N_("random matrix and start"), (rng.standard_normal((m, n)), rng.standard_normal((n, r)))))
    return fixed + rand


def _hook_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("two workers"), ([np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 2.0, 1.0], np.float32)],)),
             Case(N_("one worker alone"), ([np.array([0.5, -0.25], np.float32)],)),
             Case(N_("large values: divide before the sum"), ([np.full(4, 40000.0, np.float32)] * 4,))]
    rand = []
    for _draw in range(4):
        n, w = int(rng.integers(1, 5000 if hidden else 100)), int(rng.integers(2, 9))
        rand.append(Case(N_("random bucket"), ([(rng.standard_normal(n) * rng.uniform(1e-3, 10)).astype(np.float32)
                                            for _draw in range(w)],)))
    return fixed + rand


# The grader's own fake bucket and all-reduce: the learner's fp16_hook runs as worker 0 of
# len(grads) workers, the others sending their gradients the same way. This code comes from the
# tests file, never from the notebook: a run_hook edited in the notebook changes nothing.
HOOK_HARNESS = """
import numpy as np
import torch


def run(hook, grads):
    grads = [torch.tensor(np.asarray(g, dtype=np.float32)) for g in grads]
    others, world, calls = grads[1:], len(grads), []

    class Bucket:
        def __init__(self, buffer):
            self._buffer = buffer

        def buffer(self):
            return self._buffer

        def index(self):
            return 0

        def is_last(self):
            return True

    class Group:
        world_size = world

        def allreduce(self, tensor):
            if type(tensor) is not torch.Tensor:
                raise TypeError("state.allreduce takes a torch.Tensor, not " + type(tensor).__name__)
            calls.append((str(tensor.dtype).replace("torch.", ""),
                          tensor.numel() * torch.empty((), dtype=tensor.dtype).element_size()))
            total = tensor.detach().clone()
            for other in others:
                total += (other / world).to(tensor.dtype)
            fut = torch.futures.Future()
            fut.set_result([total])
            return fut

    fut = hook(Group(), Bucket(grads[0].clone()))
    if not isinstance(fut, torch._C.Future):   # what Future.then() returns too
        raise TypeError("fp16_hook must return a torch.futures.Future, not " + type(fut).__name__)
    out = fut.wait()
    out = out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
    if not isinstance(out, torch.Tensor):
        raise TypeError("the future's value must be a tensor, not " + type(out).__name__)
    back = str(out.dtype).replace("torch.", "")
    return out.detach().to(torch.float32).numpy(), sum(n for _, n in calls), [d for d, _ in calls], back
"""


def _hook_compare(expected, got, args):
    if not isinstance(got, (list, tuple)) or len(got) != 4:
        return _("the hook's result could not be read: {v}").format(v=show(got))
    avg, sent, dtypes, back = got
    if not dtypes:
        return _("the hook never called state.allreduce: the other workers' gradients never arrived")
    if any(d != "float16" for d in dtypes):
        return _("the hook sent {dtypes} through state.allreduce: send float16").format(dtypes=", ".join(dtypes))
    if int(sent) != int(expected[1]):
        return _("bytes sent: expected {want} (2 bytes per entry: float16), got {v}").format(
            want=int(expected[1]), v=show(sent))
    if back != "float32":
        return _("the future's value is {dtype}: give the average back in the bucket's dtype, float32").format(
            dtype=back)
    # fp16 keeps about 3 significant digits; the sum of N values divided by N is rounded once per worker
    exact = np.mean([np.asarray(g, np.float64) for g in args[0]], axis=0)
    scale = max(float(np.abs(exact).max()), 1e-30)
    return array(dtype=np.float32, rtol=2e-3, atol=2e-3 * scale)(expected[0], avg, args)


TASKS = [
    Task("06.1", "delta_encode", 3, _index_sets, byte_array()),
    Task("06.2", "delta_decode", 2, _decode_cases, _decode_compare),
    Task("06.3", "overlap_timeline", 3, _timelines, array(rtol=1e-9, atol=1e-12)),
    Task("06.4", "step_time", 2, _step_cases, number(rtol=1e-9, atol=1e-12)),
    Task("06.5", "accumulation_cost", 2, _accumulation_cases,
         several(number(rtol=1e-9), number(rtol=1e-9), names=("seconds_per_sample", "bytes_per_sample"))),
    Task("06.6", "power_step", 3, _power_cases, array(rtol=1e-6, atol=1e-9)),
    Task("06.7", "fp16_hook", 3, _hook_cases, _hook_compare, params=("grads",), harness=HOOK_HARNESS),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "06.1": functools.partial(_index_sets, hidden=True),
    "06.2": functools.partial(_decode_cases, hidden=True),
    "06.3": functools.partial(_timelines, hidden=True),
    "06.4": functools.partial(_step_cases, hidden=True),
    "06.5": functools.partial(_accumulation_cases, hidden=True),
    "06.6": functools.partial(_power_cases, hidden=True),
    "06.7": functools.partial(_hook_cases, hidden=True),
}
### END HIDDEN TESTS
