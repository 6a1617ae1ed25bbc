"""The launcher names the rank at fault: one killed by a signal (not the peer that then lost
its connection), one that stopped making progress (not the peers left waiting for it)."""
import os
import subprocess
import sys

import pytest

from milktea.distributed.launch import WorkerError, WorkerHang, launch

import launch_workers as w  # noqa: E402  (workers import it by this name)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_rank_is_named_not_the_peer_that_lost_it(victim):
    with pytest.raises(WorkerError) as info:
        launch(w.kill_self_at, 2, args=(victim, 3), timeout=150, threads=1)
    e = info.value
    assert e.rank == victim and e.exc_type == "ProcessExit", str(e)
    assert "SIGKILL" in str(e)


# The stall timeout is generous: on a loaded machine a healthy step can take seconds, and a
# stall declared before rank 1 really stops would name whichever rank was slow then.
def test_a_hung_rank_is_named_after_the_stall_timeout():
    with pytest.raises(WorkerHang) as info:
        launch(w.hang_at, 2, args=(1, 5), stall_timeout=20, collective_timeout=170, timeout=170, threads=1)
    assert info.value.rank == 1, str(info.value)
    assert "(no progress)" in str(info.value)     # the stall check, not the run's time limit
    assert "rank 1 stopped making progress" in str(info.value)
    assert "busy at launch_workers.py" in str(info.value) and "in hang_at" in str(info.value)
    assert info.value.steps[0] >= info.value.steps[1]


def test_the_whole_run_timeout_also_names_the_rank_behind():
    # 45 s: room for both ranks to start and reach step 3 on a loaded machine, no more
    with pytest.raises(WorkerHang) as info:
        launch(w.hang_at, 2, args=(0, 3), timeout=45, collective_timeout=170, threads=1)
    assert info.value.rank == 0 and "rank 0 stopped making progress" in str(info.value)


def test_train_timeout_flag_reaches_the_launcher():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "milktea.train", "--workers", "2", "--timeout", "0"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--timeout must be > 0" in r.stderr
    from milktea.distributed.train import build_parser, launch_timeouts
    a = build_parser().parse_args(["--timeout", "7"])
    assert launch_timeouts(a.timeout) == {"stall_timeout": 7, "collective_timeout": 44}
    from milktea.distributed.compare import build_parser as compare_parser
    assert compare_parser().parse_args(["--timeout", "9"]).timeout == 9
