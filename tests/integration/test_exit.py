"""Ranks leave cleanly: under torchrun a finished run exits 0, every time.

DistributedDataParallel keeps its gloo process group alive after the model is gone, so
gloo's threads are still running when the interpreter tears down, and a few normal exits
in twenty abort (SIGABRT, "terminate called without an active exception") after the work
is done. milktea's entry points leave through `milktea.distributed.worker.end_process`.
"""
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(900)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


@pytest.mark.skipif(not os.path.exists(TORCHRUN), reason="torchrun is not installed beside this Python")
def test_torchrun_training_exits_zero_ten_times_in_a_row():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "milktea.train",
           "--scheme", "int8", "--steps", "2", "--hidden", "16"]
    # Without end_process about 3 exits in 20 aborted: ten clean runs in a row would have
    # caught that 4 times in 5 (and every CI run samples ten more); each costs ~10 s of CPU.
    for attempt in range(10):
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "terminate called" not in r.stderr, \
            f"run {attempt + 1} of 10 ended with {r.returncode}:\n{r.stderr[-3000:]}"
        assert "int8: 2 workers" in r.stdout


def _python(code, *flags):
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, PYTHONPATH=ROOT))


def test_end_script_flushes_and_leaves_with_its_code():
    # no atexit handler runs after it: the process is gone before the interpreter's tear-down
    r = _python("import atexit, sys, milktea.ddp\n"
                "atexit.register(lambda: print('tear-down ran'))\n"
                "sys.stdout.write('unflushed'); sys.stderr.write('err')\n"
                "milktea.ddp.end_script(3)\n"
                "print('after')")
    assert (r.returncode, r.stdout, r.stderr) == (3, "unflushed", "err")


def test_end_script_in_an_interactive_session_returns():
    r = _python("import milktea.ddp\nmilktea.ddp.end_script(3)\nprint('the session goes on')", "-i")
    assert r.returncode == 0 and "the session goes on" in r.stdout, r.stderr
