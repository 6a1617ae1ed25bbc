"""Multi-process tests: launcher, DDP hooks against the single-process aggregation, hook
state, options, emulated link, entry points. Each launch starts real worker processes."""
import os
import subprocess
import sys
import time
import types

import pytest
import torch

from milktea import QSGD, Cast, Chain, Identity, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
from milktea.distributed import WorkerError, launch
from milktea.threads import per_rank

import dist_workers as w  # noqa: E402  (workers import it by this name)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:   # a zombie is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


# --- launcher ------------------------------------------------------------------------------
def test_launch_runs_every_rank_and_returns_results():
    out = launch(w.rank_sum, 2, results="all", timeout=120)
    assert [r["rank"] for r in out] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 for r in out)
    assert all(r["threads"] == per_rank(local_world=2) for r in out)
    assert not any(_alive(r["pid"]) for r in out)


@pytest.mark.timeout(90)
def test_a_failing_rank_stops_the_run_and_is_named(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(w.fail_on, 3, args=(1, str(tmp_path)), timeout=80)
    err = info.value
    assert err.rank == 1 and err.exc_type == "ValueError"
    assert "rank 1" in str(err) and "boom on purpose" in str(err)
    assert "fail_on" in err.remote_traceback           # the remote traceback came back
    assert isinstance(err.original, ValueError)
    pids = [int(p) for p in os.listdir(tmp_path)]
    assert len(pids) == 3 and not any(_alive(p) for p in pids)   # the blocked ranks were stopped
    # the others were blocked in a barrier forever: only killing them ends this quickly
    print(f"failure reported after {time.monotonic() - t0:.1f} s")


@pytest.mark.timeout(90)
def test_a_rank_that_dies_without_a_word_is_reported():
    with pytest.raises(WorkerError, match="rank 0 failed.*exited with code 7"):
        launch(w.exit_hard, 2, args=(0,), timeout=80)


def test_launch_rejects_what_workers_cannot_import(monkeypatch):
    with pytest.raises(TypeError, match="pickle"):
        launch(lambda: 1, 2)
    fake_main = types.ModuleType("__main__")          # a notebook's __main__ has no __file__
    monkeypatch.setitem(sys.modules, "__main__", fake_main)

    def in_a_cell():
        return 1
    in_a_cell.__module__ = "__main__"
    with pytest.raises(TypeError, match="importable|module"):
        launch(in_a_cell, 2)
    with pytest.raises(ValueError, match="nprocs"):
        launch(w.rank_sum, 0)


# --- hooks: the averaged gradient equals the single-process aggregation ---------------------
SPECS = [
    ("topk", TopK(0.1), True, 0), ("topk-approx", TopK(0.1, approximate=True), True, 0),
    ("randomk", RandomK(0.1), True, 0), ("int8", Quantize(8), False, 0),
    ("int4-stochastic", Quantize(4, stochastic=True), False, 0), ("qsgd", QSGD(4), False, 0),
    ("terngrad", TernGrad(), False, 0), ("sign", Sign(), True, 0),
    ("topk-int8", Chain(TopK(0.1), Quantize(8)), True, 0), ("fp16", Cast(torch.float16), False, 0),
    ("bf16", Cast(torch.bfloat16), True, 0), ("identity", Identity(), False, 0),
    ("powersgd", PowerSGD(2), True, 0), ("powersgd-cold", PowerSGD(2, warm_start=False), False, 0),
    ("powersgd-batched", PowerSGD(2, batched=True), True, 0),   # biases too, in each bucket's one matrix
    ("topk-mixed", TopK(0.1), True, 100),   # biases (< 100 elements) stay dense
]
EXACT = {"topk", "topk-approx", "randomk", "int8", "int4-stochastic", "qsgd", "terngrad", "sign",
         "topk-int8", "topk-mixed"}


# three ranks (an odd N: no exact halving): one compressor of each family
SPECS3 = [s for s in SPECS if s[0] in ("topk-approx", "randomk", "int4-stochastic", "sign", "topk-int8", "bf16",
                                       "identity", "powersgd", "topk-mixed")]


@pytest.mark.parametrize("workers", [2, 3])
def test_hook_average_equals_single_process_aggregation(workers, ranks):
    out = ranks(workers).run(w.hooks_vs_reference, args=(SPECS if workers == 2 else SPECS3,), timeout=170)
    for label, res in out.items():
        assert res["compressed"] and res["buckets"] >= 2, label
        errs, scale = res["errors"], res["scale"]
        assert len(errs) == 3 and len(res["dense_errors"]) == 4
        # step 0 (DDP settles its buckets) and parameters kept dense: the all-reduced mean
        assert max(res["dense_errors"]) <= 1e-6 * scale, (label, res["dense_errors"])
        if label in EXACT:   # the same packets, decoded once each, summed, divided by N: bit for bit
            assert max(errs) == 0.0, (label, errs)
        elif label in ("fp16", "bf16"):   # summed on the wire in 16 bits: within a few ulps
            ulp = 2 ** -10 if label == "fp16" else 2 ** -7
            assert max(errs) <= 2 * workers * ulp * scale, (label, errs, scale)
        else:                # identity (all-reduce), PowerSGD vs the float64 shared-basis reference
            assert max(errs) <= 1e-5 * scale, (label, errs, scale)
    assert out["topk-mixed"]["dense_segments"] > 0 and out["topk-approx"]["dense_segments"] == 0
    assert out["topk-approx"]["ratio"] > 5 and out["sign"]["ratio"] > 25 and out["bf16"]["ratio"] == 2.0
    if workers == 2:     # one P and one Q per bucket: fewer bytes than a P and a Q per matrix
        assert out["powersgd-batched"]["ratio"] > out["powersgd"]["ratio"]


def test_hook_state_round_trip(ranks):
    comps = (TopK(0.05), PowerSGD(2), RandomK(0.05))
    for comp, res in zip(comps, ranks(2).run(w.state_round_trips, args=(comps,), timeout=150)):
        assert res["step"] == 3 and res["residual_norm"] > 0 and res["compressed_at_once"], comp
        assert res["max_diff"] == 0.0, (comp, res)             # restored == never interrupted
        assert res["unrestored_diff"] > 0.0, (comp, res)       # and the ledger did matter


def test_dense_for_the_first_steps(ranks):
    rows = ranks(2).run(w.start_step_check, args=(3,), timeout=120)
    assert [c for c, _ in rows] == [False, False, False, True, True]
    assert all(err < 1e-6 for _, err in rows[:3])      # dense steps: the exact mean
    assert rows[3][1] > 1e-4                           # compressed: not the mean any more


def test_bad_arguments_and_nan_gradients(ranks):
    from milktea.ddp import compress
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        compress(torch.nn.Linear(2, 2), TopK(0.1))
    for ef in (False, True):   # with error feedback the NaN must not hide in the ledger
        with pytest.raises(WorkerError, match=r"rank 1 failed: .*milktea hook on rank 1.*ValueError.*non-finite"):
            launch(w.nan_gradient, 2, args=(ef,), timeout=120)
    said = ranks(1).run(w.hook_refusals, timeout=120)
    assert [kind for kind, _ in said] == ["ValueError", "TypeError", "TypeError", "ValueError"]
    assert "start_step must be >= 0, got -1" in said[0][1] and "min_size must be an int" in said[1][1]
    assert "policy must be one of ('always', 'auto')" in said[3][1]


def test_emulated_link_makes_collectives_take_what_the_link_would(ranks):
    res = ranks(2).run(w.emulated_collectives, args=(50e6, 2e-3, 1 << 20), timeout=120)
    for kind in ("allreduce", "allgather", "torch_allreduce"):
        measured, predicted = res[kind]
        assert predicted > 0.005 and measured >= predicted, (kind, measured, predicted)
    assert res["sizes"] == [(1 << 20) // 10, (1 << 20) // 10 + 1]
    assert res["sum"] == 2.0                               # the real collective still ran
    assert res["logged"] > 0.02 and res["torch_logged"] == 1 and res["untouched"]


def test_measure_allreduce_takes_the_fastest_try_of_the_slowest_rank(ranks):
    out = ranks(2).run(w.measured_allreduce, args=(1e-3,), results="all", timeout=120)
    assert out[0]["sizes"] == [4096, 2 << 20] and out[0]["tries"] == [6, 2]   # small messages: 3x
    assert out[0]["times"] == out[1]["times"]                                 # every rank agrees
    assert all(t >= 0.02 for t in out[0]["times"])                            # rank 1's, the slowest


def test_a_step_is_priced_with_the_slowest_ranks_codec_time(ranks):
    out = ranks(2).run(w.slowest_codec, results="all", timeout=120)
    assert out[0] == out[1]
    assert out[0] == [(0, 2.0, 2.0), (1, 2.0, 2.0)]   # the max of each, on every rank


def test_train_config_refuses_counts_it_cannot_run():
    from milktea.distributed.train import TrainConfig
    with pytest.raises(ValueError, match="steps must be >= 1, got 0"):
        TrainConfig(steps=0)
    with pytest.raises(TypeError, match="batch must be an int"):
        TrainConfig(batch=32.0)


# --- entry points -------------------------------------------------------------------------
def _run(cmd, timeout=170):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_train_entry_point_with_local_workers_and_under_torchrun(tmp_path):
    log = tmp_path / "steps.jsonl"
    r = _run([sys.executable, "-m", "milktea.train", "--workers", "2", "--scheme", "topk", "--steps", "6",
              "--hidden", "16", "--jsonl", str(log)])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Top-1%+EF: 2 workers" in r.stdout and "test accuracy" in r.stdout
    assert len(log.read_text().splitlines()) == 6
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed beside this Python")
    r = _run([torchrun, "--nproc-per-node", "2", "-m", "milktea.train", "--scheme", "int8",
              "--steps", "4", "--hidden", "16", "--jsonl", str(tmp_path / "t.jsonl")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "int8: 2 workers" in r.stdout
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 4


def test_compare_table_jsonl_and_plots(tmp_path):
    from milktea.distributed.compare import compare
    res = compare(["dense", "torch-fp16", "topk", "auto"], link_gbit=0.5, steps=5, hidden=32,
                  progress=False, timeout=170, calibrate_sizes=(4096, 1 << 18))
    rows = {r["scheme"]: r for r in res.rows}
    assert set(rows) == {"dense", "torch-fp16", "topk", "auto"}
    assert rows["dense"]["speedup"] == 1.0 and rows["topk"]["ratio"] > 5
    assert all(r["predicted_ms"] > 0 and 0 <= r["accuracy"] <= 1 for r in rows.values())
    text = res.table()
    assert "Top-1%+EF" in text and "calibrated" in text
    assert "interleaved" in res.where
    paths = res.save(str(tmp_path))
    assert len(open(paths[0]).read().splitlines()) == 4 * 5      # one record per step per scheme
    assert all(os.path.getsize(p) > 1000 for p in paths[2:])     # the two PNGs
    seq = compare(["dense", "int8"], link_gbit=None, steps=3, hidden=32, progress=False, timeout=170,
                  calibrate_sizes=(4096, 1 << 18), interleave=False)
    assert "one scheme after another" in seq.where and [r["scheme"] for r in seq.rows] == ["dense", "int8"]


def test_compare_on_ranks_already_up_gives_the_fresh_ranks_result():
    """compare(ranks=pool): the same training as on fresh ranks, twice on the same pool."""
    from milktea.distributed import Pool
    from milktea.distributed.compare import compare, ready
    run = dict(link_gbit=None, steps=3, hidden=32, progress=False, timeout=170, calibrate_sizes=(4096, 1 << 18))
    fresh = compare(["dense", "int8"], **run)
    with Pool(2) as pool:
        assert ready(pool, ["dense", "int8"]) is pool
        pooled = [compare(["dense", "int8"], ranks=pool, **run) for _ in range(2)]
        with pytest.raises(ValueError, match="Pool of workers=3"):
            compare(["dense"], workers=3, ranks=pool, **run)
    losses = [[[rec["loss"] for rec in r["records"]] for r in c.results] for c in [fresh, *pooled]]
    assert losses[0] == losses[1] == losses[2]
    assert [r["final"] for r in pooled[0].results] == [r["final"] for r in fresh.results]
