"""Time limits are CPU time: a correct submission that needs 0.4 s of CPU per case keeps full marks
when three busy processes share its one core (each case then takes longer than the 1 s limit in
wall-clock time), while an endless loop is still stopped. About 10 s: the load is real."""
import os
import subprocess
import sys

import numpy as np
import pytest

from milktea.grade.child import encode
from milktea.grade.sandbox import Cell, Limits, TaskJob, run

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")

CELL = Cell("c0", "the cell", """import time

def slow(x, k):
    start = time.process_time()
    while time.process_time() - start < 0.4:   # 0.4 s of CPU, however long that takes
        pass
    return float(k)

def hang(x, k):
    while True:
        pass
""")


@pytest.fixture
def one_busy_core():
    """This process (so the children it starts) and three spinning processes on one core."""
    before = os.sched_getaffinity(0)
    core = min(before)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda: os.sched_setaffinity(0, {core})) for _ in range(3)]
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        for h in hogs:
            h.kill()
            h.wait()


def test_a_slow_correct_answer_under_load_keeps_its_marks(one_busy_core):
    case = {"args": encode([np.zeros(3), 2]), "kwargs": None}
    limits = Limits(task_seconds=1.0, submission_seconds=30, memory_mb=1024, wall_factor=30)   # others load it too
    res = run([CELL], [TaskJob("1", "slow", [case, case]), TaskJob("2", "hang", [case])], limits)
    slow = res.outcomes["1"]
    assert [o.ok for o in slow] == [True, True], [(o.kind, o.message) for o in slow]
    assert sum(o.seconds for o in slow) > limits.task_seconds   # the wall clock alone would have failed it
    assert res.outcomes["2"][0].kind == "timeout" and "CPU time" in res.outcomes["2"][0].message
    assert 0.8 <= res.cpu_seconds < 4   # what the student's code used: its two cases and the loop's second
