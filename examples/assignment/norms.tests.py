"""Tests of the example assignment norms.ipynb (the format: docs/grading.md, "Write an assignment").

TASKS holds the public tests: every case generator returns fixed edge cases, then random ones
drawn from `rng`; a release ships the public cases with their expected outputs and this file's
code outside the markers. HIDDEN, between the markers, is left out of every release: the class
grader and the Gradescope bundle add it. So the hidden sizes and edge cases are written there.
"""
import numpy as np

from milktea.grade.spec import Case, Task, array, number


def _grads(rng, ref, size=30, fixed=True):
    edge = [] if not fixed else [
        Case("one array", ([np.array([3.0, 4.0])],)),
        Case("two arrays of different shapes", ([np.array([3.0, 0.0]), np.array([[0.0], [4.0]])],)),
        Case("all zeros", ([np.zeros(3), np.zeros((2, 2))],)),
        Case("float32 arrays", ([np.full(4, 0.5, np.float32), np.ones(2, np.float32)],))]
    rand = [Case("random model", ([rng.standard_normal(int(rng.integers(1, size))) * rng.uniform(0.01, 10)
                                   for _ in range(int(rng.integers(1, 5)))],)) for _ in range(3)]
    return edge + rand


def _clip_cases(rng, ref, size=30, fixed=True):
    cases = []
    for i, c in enumerate(_grads(rng, ref, size, fixed)):
        norm = ref["global_norm"](c.args[0])
        limit = [norm * 2, norm / 2, 1.0][i % 3]   # above, below, and a fixed limit
        cases.append(Case(c.label, (c.args[0], limit)))
    return cases


def _clip_compare(expected, got, args):
    if not isinstance(got, (list, tuple)) or len(got) != len(expected):
        return f"expected a list of {len(expected)} arrays, got {type(got).__name__}"
    for i, (e, g) in enumerate(zip(expected, got)):
        problem = array(same_dtype_as=None, rtol=1e-6, atol=1e-12)(e, g, args)
        if problem:
            return f"array {i}: {problem}"
    return None


def _ring_cases(rng, ref):
    return [Case("two machines", (2,)), Case("eight machines", (8,))] + [
        Case("a random ring", (int(rng.integers(3, 1000)),)) for _ in range(3)]


TASKS = [
    Task("hw.1", "global_norm", 2, _grads, number(rtol=1e-9)),
    Task("hw.2", "clip_by_global_norm", 2, _clip_cases, _clip_compare),
    Task("hw.3", "ring_steps", 1, _ring_cases, number(), reveal=False, visibility="after_published"),
]

### BEGIN HIDDEN TESTS
HIDDEN = {
    "hw.1": lambda rng, ref: _grads(rng, ref, size=5000, fixed=False),
    "hw.2": lambda rng, ref: _clip_cases(rng, ref, size=5000, fixed=False),
    "hw.3": [Case("one machine: nothing to send", (1,))],
}
### END HIDDEN TESTS
