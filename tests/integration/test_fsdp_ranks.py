"""milktea.fsdp on real FSDP2 ranks (gloo): FSDP2's own result kept where nothing is dropped,
HSDP's replicate hop, the cost model against what crossed, refusals, and a bit-identical
resume in new processes. The workers are in tests/fsdp_workers.py; each job runs several
small runs of the 2-layer character GPT (245,760 parameters)."""
import pytest
import torch

from milktea.distributed import launch
import fsdp_workers as w  # noqa: E402  (workers import it by this name)


@pytest.mark.parametrize("n", [2, 4])
def test_none_is_fsdp2_and_packets_that_drop_nothing_agree_to_rounding(ranks, n):
    out = ranks(n).run(w.agrees_with_fsdp2, timeout=200)
    for tag in ("fp32", "bf16"):
        pure, none, ident = out[tag]["losses"]
        assert out[tag]["none"] == 0.0 and none == pure        # FSDP2's collectives, only counted
        # all-to-all of dense packets, summed in float32 in rank order: the sum's rounding only
        assert ident == pytest.approx(pure, rel=1e-3 if tag == "bf16" else 1e-6)
        assert 0.99 < out[tag]["identity_rs_ratio"] < 1.0      # the same bytes, plus headers
    assert out["fp32"]["identity"] <= 1e-6
    assert out["bf16"]["identity"] <= 2e-3                      # SGD steps of bfloat16-rounded sums


def test_hsdp_compresses_the_replicate_hop_with_a_ledger_on_the_shard(ranks):
    out = ranks(4).run(w.hsdp_agrees, timeout=200)
    assert out["ours"] == 0.0 and out["counted"] == 0.0        # milktea's hop == FSDP2's 2-D mesh here
    assert out["topk_ledger"] == "shard"
    assert out["topk_memory"]["ledger"] == 4 * out["params"] // 2    # float32, P / S entries
    last = out["topk_traffic"][-1]
    assert last.ratio("all_reduce") > 10 and last.ratio("reduce_scatter") == 1.0
    dense = out["ours_traffic"][-1]
    assert dense.bytes("all_reduce") == dense.dense_bytes("all_reduce") > 0
    native, ours, topk = out["losses"]
    assert ours == native and topk[-1] < topk[0]


def test_the_cost_model_prices_what_crossed_within_ten_percent(ranks):
    for row in ranks(2).run(w.priced, timeout=200):
        for k, got in row["measured"].items():
            assert got == pytest.approx(row["model"][k], rel=0.10), (row["label"], k)
        if row["label"] == "zero-2":                                # weights kept from forward to backward
            assert row["measured"]["all_gather_backward"] == 0 < row["measured"]["all_gather_forward"]
        for k in ("params", "grads", "optimizer", "ledger", "total"):
            assert row["memory"][k] == pytest.approx(row["mem_model"][k], rel=0.10, abs=1), (row["label"], k)
    top = row["measured"]["reduce_scatter"]
    assert top < row["measured"]["all_gather_forward"] / 20       # Top-1%'s packets


def test_setups_it_cannot_serve_are_refused_with_what_to_do(ranks):
    said = ranks(2).run(w.refusals, timeout=120)
    assert said["two meshes"][0] == "ValueError" and "shard_placement_fn" in said["two meshes"][1]
    assert said["native hsdp"][0] == "ValueError" and "hsdp_mesh" in said["native hsdp"][1]
    assert said["native hsdp counted"] is None
    assert said["shard ledger in 1-D"][0] == "ValueError" and "'worker'" in said["shard ledger in 1-D"][1]
    assert said["another rank's state"][0] == "ValueError" and "each rank loads its own" in said["another rank's state"][1]


def test_a_run_resumed_in_new_processes_is_bit_identical(ranks, tmp_path):
    # int4 with stochastic rounding and a ledger, int8 weights with stochastic rounding:
    # the ledgers and every random stream must come back
    whole = ranks(2).run(w.run_and_save, args=(str(tmp_path),), results="all", timeout=200)
    resumed = launch(w.resume, 2, args=(str(tmp_path),), results="all", timeout=200)
    for a, b in zip(whole, resumed):
        assert b["losses"] == a["losses"][3:]
        assert all(torch.equal(a["shards"][k], b["shards"][k]) for k in a["shards"])


def test_a_notebooks_run_reports_what_crossed_beside_the_cost_model(ranks):
    import milktea.fsdp
    from milktea import Quantize
    r = milktea.fsdp.run(Quantize(bits=4, chunk=256), workers=2, steps=3, weights=Quantize(bits=8, chunk=256),
                         ranks=ranks(2), evaluate=True)
    assert len(r.losses) == 3 and r.ledger is None and r.eval_loss > 0
    priced = r.priced()
    for k in ("reduce_scatter", "all_gather_forward", "all_gather_backward"):
        assert r.bytes(k) == pytest.approx(priced[k], rel=0.10), k
    assert 6.5 < r.rows()[2]["ratio"] < 8 and "fewer than FSDP2's own" in repr(r)
    assert len(r.memory) == 2 and r.memory[1]["optimizer"] == 2 * r.memory[1]["params"]
    with pytest.raises(ValueError, match="pool has 2 ranks"):
        milktea.fsdp.run(None, workers=4, ranks=ranks(2))


def test_the_gpu_benchs_fsdp_check_runs_on_two_gloo_ranks(ranks):
    """`python -m milktea.bench gpu`'s FSDP2 check, on the CPU: what it runs over NCCL works."""
    from milktea.bench.gpu import fsdp_step
    res = ranks(2).run(fsdp_step, timeout=200)
    assert res["backend"] == "gloo" and res["same"] and res["steps"] == 3 and 0 < res["int8_diff"] < 1e-2
