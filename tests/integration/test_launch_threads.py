"""Each rank sizes its thread pools to its share of the cores when milktea is imported
(under torchrun as under milktea's launcher), and keeps any count the user set."""
import json
import os
import subprocess
import sys

import pytest

from milktea.threads import cpu_count, per_rank

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# milktea.kernels sizes the pools before numba (which it loads only on first use) starts them
PROBE = ("import json, milktea.kernels, numba, torch; from milktea import threads; "
         "print(json.dumps([numba.config.NUMBA_NUM_THREADS, torch.get_num_threads(), threads.configure()]))")
# the way a user's script gets there: `import milktea`, then a compressor on a gradient large
# enough for the compiled loops, which is when numba is first imported
PUBLIC = ("import json, sys, torch, milktea; assert 'numba' not in sys.modules; "
          "milktea.TopK(0.01).compress(torch.randn(1 << 18)); import numba; from milktea import threads; "
          "print(json.dumps([numba.config.NUMBA_NUM_THREADS, torch.get_num_threads(), threads.configure()]))")


def _pools(probe=PROBE, **env):
    full = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE", "MKL_NUM_THREADS")}
    full.update(PYTHONPATH=ROOT, **env)
    r = subprocess.run([sys.executable, "-c", probe], env=full, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_per_rank_share():
    assert per_rank(local_world=2, cores=16) == 8
    assert per_rank(local_world=3, cores=16) == 5
    assert per_rank(local_world=4, cores=2) == 1


def test_a_rank_under_torchrun_gets_its_share_of_the_cores():
    numba_n, torch_n, plan = _pools(LOCAL_WORLD_SIZE="2")
    share = max(1, cpu_count() // 2)
    assert numba_n == share and torch_n == share and plan["numba"] == share


def test_numba_loaded_on_first_use_starts_with_the_share():
    numba_n, torch_n, plan = _pools(PUBLIC, LOCAL_WORLD_SIZE="2")
    share = max(1, cpu_count() // 2)
    assert numba_n == share and torch_n == share and plan["numba"] == share


def test_what_the_user_set_is_kept():
    numba_n, torch_n, plan = _pools(LOCAL_WORLD_SIZE="2", NUMBA_NUM_THREADS="3", OMP_NUM_THREADS="2")
    assert (numba_n, torch_n) == (3, 2) and plan["numba"] == plan["torch"] == "as is"


@pytest.mark.skipif(cpu_count() < 2, reason="one core: every share is 1")
def test_outside_a_job_nothing_changes():
    numba_n, _, plan = _pools()
    assert plan["local_world"] == 1 and plan["numba"] == "as is" and numba_n == cpu_count()
