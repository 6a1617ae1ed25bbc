"""The launcher names the rank at fault: one killed by a signal (not the peer that then lost
its connection), one that stopped making progress (not the peers left waiting for it)."""
import os
import subprocess
import sys
import time

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


# A rank stops inside its step (a sleep); its peer waits in that step's collective until
# `collective_timeout` (6 s here: a healthy step of these small models takes milliseconds,
# even on a loaded machine). The hang is named then, plus about a second: not at the run's
# time limit (150 s), and the rank named is the one that stopped, not the one left waiting.
@pytest.mark.parametrize("how", ["allreduce", "ddp", "ddp+hook"])
def test_a_stopped_rank_is_named_when_its_peers_collective_times_out(how):
    stopped_at = []
    fn, args = (w.hang_at, (1, 5)) if how == "allreduce" else (w.ddp_hang_at, (1, 5, how == "ddp+hook"))
    with pytest.raises(WorkerHang) as info:
        launch(fn, 2, args=args, collective_timeout=6, timeout=150, threads=1,
               on_message=lambda rank, msg: stopped_at.append(msg[1]))
    late = time.time() - stopped_at[0]
    text = str(info.value)
    assert info.value.rank == 1 and "rank 1 stopped making progress after 5 steps" in text, text
    assert "busy at launch_workers.py" in text and f"in {fn.__name__}" in text      # what it was doing
    assert "Rank 0 waited for it in a collective until that timed out (Timed out waiting 6000ms" in text
    assert late < 6 + 30, f"named {late:.0f} s after the rank stopped"            # not at the 150 s limit
    # the error ends with the threads of the ranks still running: rank 1's main thread, asleep
    assert "--- rank 1 ---" in text and "--- rank 0 ---" not in text, text
    assert f"in {fn.__name__}" in text.split("--- rank 1 ---")[1], text


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
    from milktea.distributed.compare_cli import build_parser as compare_parser
    assert compare_parser().parse_args(["--timeout", "9"]).timeout == 9


# python -m milktea.train whose rank 1 stops inside its step 5 (tests/hang_train.py patches the
# step): with --workers the launcher's stall check names it after --timeout; under torchrun
# rank 0's collective times out after --timeout and it reads rank 1's heartbeat from the store.
@pytest.mark.parametrize("runner", ["workers", "torchrun"])
def test_train_names_the_rank_that_stopped(runner):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if runner == "torchrun" and not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed beside this Python")
    script = os.path.join(ROOT, "tests", "hang_train.py")
    flags = ["--scheme", "topk", "--steps", "1000", "--hidden", "16", "--timeout", "6"]
    cmd = ([sys.executable, script, "--workers", "2"] if runner == "workers" else
           [torchrun, "--standalone", "--nproc-per-node", "2", script])
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd + flags, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode != 0
    said = [line for line in r.stderr.splitlines() if "stopped making progress" in line]
    assert said and "rank 1 stopped making progress after 5 steps" in said[0], r.stderr[-3000:]
    assert "busy at hang_train.py" in said[0] and "in stalling_step" in said[0]
    assert ("(no progress)" if runner == "workers" else "Rank 0 waited for it in a collective") in said[0]
