"""Example hidden tests for exercise 03, used by the test suite only.

An instructor keeps files like this outside the course folder and passes their folder to
`python -m milktea.grade SUBMISSIONS --out GRADES --hidden DIR`. Each file is named after its
exercise and maps task ids to cases (or to functions of (rng, reference) returning cases).
"""
import numpy as np

from milktea.grade.spec import Case


def _big(rng, ref):
    x = rng.standard_normal(200_000).astype(np.float32)
    return [Case("a large gradient, Top-0.1%", (x, 200))]


CASES = {
    "03.1": [Case("float16 gradient", (np.array([0.5, -3.0, 2.0, 1.0], np.float16), 2)),
             Case("all equal", (np.ones(7, np.float32), 3))],
    "03.2": _big,
    "03.3": [Case("a 3-D gradient", (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5, 4))],
}
