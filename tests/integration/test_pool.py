"""milktea.distributed.Pool: ranks that stay up between jobs, and fail like launch."""
import os
import time

import pytest
import torch

import dist_workers as w
import launch_workers as lw
from milktea.distributed import Pool, WorkerError, launch

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


def test_jobs_run_on_the_same_ranks_as_launch_would():
    with Pool(2) as pool:
        first = pool.run(w.rank_sum, results="all", timeout=120)
        second = pool.run(w.rank_sum, results="all", timeout=60)
        assert [r["sum"] for r in first] == [3.0, 3.0] and [r["rank"] for r in first] == [0, 1]
        assert [r["pid"] for r in first] == [r["pid"] for r in second]   # no new process
        assert pool.starts == 1 and "up" in repr(pool)
        assert first[0]["threads"] == launch(w.rank_sum, 2, results="all", timeout=120)[0]["threads"]
    assert not any(_alive(r["pid"]) for r in first)   # close() ended them


def test_a_job_does_not_see_the_last_jobs_random_draws():
    with Pool(2) as pool:
        first = pool.run(lw.draw, timeout=120)
        assert torch.equal(pool.run(lw.draw, timeout=60), first)   # not the next numbers


def test_a_failed_job_names_its_rank_and_the_next_job_restarts_the_ranks(tmp_path):
    with Pool(3) as pool:
        before = pool.run(w.rank_sum, results="all", timeout=120)
        with pytest.raises(WorkerError) as info:
            pool.run(w.fail_on, args=(1, str(tmp_path)), timeout=60)
        assert info.value.rank == 1 and "boom on purpose" in str(info.value)
        assert not any(_alive(r["pid"]) for r in before)    # the blocked ranks were stopped
        after = pool.run(w.rank_sum, results="all", timeout=120)
        assert pool.starts == 2 and [r["sum"] for r in after] == [6.0] * 3


def test_a_job_past_its_timeout_is_stopped():
    with Pool(2) as pool:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="time limit"):
            pool.run(lw.sleep_forever, timeout=3)
        assert time.monotonic() - t0 < 30 and "down" in repr(pool)


def test_messages_and_bad_arguments():
    seen = []
    with Pool(2) as pool:
        pool.run(lw.say_hello, on_message=lambda rank, obj: seen.append((rank, obj)), timeout=120)
        assert sorted(seen) == [(0, "hello from 0"), (1, "hello from 1")]
        with pytest.raises(TypeError, match="pickle"):
            pool.run(lambda: 1)
        with pytest.raises(ValueError, match="results"):
            pool.run(w.rank_sum, results="some")
    with pytest.raises(ValueError, match="nprocs"):
        Pool(0)
