"""The GPT task on real worker processes: DDP hooks against the single-process aggregation,
the training entry point (own workers and torchrun), compare, and the README's example."""
import os
import subprocess
import sys

import pytest
import torch

from milktea import Chain, PowerSGD, Quantize, Sign, TopK
from milktea.distributed.launch import free_port

import dist_workers as w  # noqa: E402  (workers import it by this name)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]   # a busy 2-core machine is slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")

SPECS = [
    ("topk", TopK(0.05), True, 0),            # every tensor compressed, LayerNorms included
    ("topk-mixed", TopK(0.05), True, 100),    # LayerNorms and biases (< 100 numbers) dense
    ("int8", Quantize(8), False, 0), ("sign", Sign(), True, 0),
    ("topk-int8", Chain(TopK(0.05), Quantize(8)), True, 0),
    ("powersgd", PowerSGD(2), True, 0),
]


def test_hook_average_equals_the_mean_of_decoded_packets_on_the_gpt(ranks):
    out = ranks(2).run(w.hooks_vs_reference, args=(SPECS,), kwargs=dict(network="gpt"), timeout=280)
    for label, res in out.items():
        assert res["compressed"] and res["buckets"] >= 2, label
        errs, scale = res["errors"], res["scale"]
        assert len(errs) == 3 and max(res["dense_errors"]) <= 1e-6 * scale, (label, res["dense_errors"])
        if label == "powersgd":     # against the float64 shared-basis reference
            assert max(errs) <= 1e-5 * scale, (label, errs, scale)
        else:                       # the same packets, decoded once each, summed, divided by N
            assert max(errs) == 0.0, (label, errs)
    assert out["topk-mixed"]["dense_segments"] > 0 and out["topk"]["dense_segments"] == 0


def _run(cmd, timeout=280):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_train_entry_point_trains_the_gpt_with_own_workers_and_under_torchrun():
    r = _run([sys.executable, "-m", "milktea.train", "--workers", "2", "--task", "gpt", "--scheme", "topk",
              "--steps", "4", "--batch", "4"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Top-1%+EF: 2 workers, 245,760 parameters" in r.stdout and "perplexity" in r.stdout
    if not os.path.exists(TORCHRUN):
        pytest.skip("torchrun is not installed beside this Python")
    r = _run([TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "milktea.train",
              "--task", "gpt", "--scheme", "powersgd", "--steps", "3", "--batch", "4"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "PowerSGD r4+EF: 2 workers, 245,760 parameters" in r.stdout


def test_an_unknown_task_is_refused_before_any_worker_starts():
    from milktea.distributed.compare import compare
    from milktea.distributed.train import TrainConfig
    with pytest.raises(ValueError, match="unknown task 'mnist'.*digits, gpt"):
        TrainConfig(task="mnist")
    with pytest.raises(ValueError, match="unknown task"):
        compare(["dense"], task="mnist", progress=False)


def test_compare_takes_the_gpt():
    from milktea.distributed.compare import compare
    res = compare(["dense", "topk"], task="gpt", link_gbit=None, steps=3, batch=4, progress=False,
                  timeout=280, calibrate_sizes=(4096, 1 << 16))
    rows = {r["scheme"]: r for r in res.rows}
    assert set(rows) == {"dense", "topk"} and rows["topk"]["ratio"] > 5
    assert all(r["params"] == 245_760 and 0 <= r["accuracy"] <= 1 for r in rows.values())
    assert res.config["task"] == "gpt"


def test_the_readme_example_runs_under_torchrun():
    if not os.path.exists(TORCHRUN):
        pytest.skip("torchrun is not installed beside this Python")
    r = _run([TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()),
              os.path.join("examples", "ddp_own_model.py")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "x smaller per step; validation {'loss':" in r.stdout
    ratio = float(r.stdout.split("x smaller")[0].split()[-1])
    assert ratio > 10                               # Top-1% with indices: well over 10x on the matrices
    loss = float(r.stdout.split("'loss': ")[1].split(",")[0])
    assert loss < 3.6                               # from ln(98) = 4.58 in 20 steps of momentum-corrected SGD
    assert torch.isfinite(torch.tensor(loss))


def test_the_readme_shows_the_example_as_it_is():
    with open(os.path.join(ROOT, "examples", "ddp_own_model.py")) as f:
        code = f.read().split('"""\n', 1)[1].strip("\n")
    with open(os.path.join(ROOT, "README.md")) as f:
        assert "```python\n" + code + "\n```" in f.read()
