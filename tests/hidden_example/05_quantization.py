"""Example hidden tests for exercise 05 (see 03_topk.py in this folder)."""
import numpy as np

from milktea.grade.spec import Case

CASES = {
    "05.1": [Case("a single value", (np.array([-0.75], np.float32), 8)),
             ("tiny numbers", (np.full(5, 1e-30, np.float32), 8))],
    "05.4": lambda rng, ref: [Case("one full byte of -7s", (np.full(2, -7, np.int8),))],
}
