"""PowerSGD's teaching functions (checked against the SVD and brute force), the bare hook API
(a hook on a fake bucket, then on two real gloo workers beside PyTorch's), DGC's ablation and
the A/B verdicts."""
import doctest
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from milktea import cost
from milktea.experiments import commhook, dgc, lowrank
from milktea.experiments import abtest


def _fp16_hook(state, bucket):
    half = bucket.buffer().to(torch.float16).div_(state.world_size)
    return state.allreduce(half).then(lambda f: f.value()[0].to(torch.float32))


@pytest.fixture(scope="module")
def m():
    return lowrank.training_gradients(hidden=48, steps=1)[0]


def test_spectrum_and_best_rank_match_numpy(m):
    spec = lowrank.spectrum(m)
    s = np.linalg.svd(m.double().numpy(), compute_uv=False)
    np.testing.assert_allclose(spec["singular values"].numpy(), s, rtol=1e-5)
    assert spec["energy"][-1] == pytest.approx(1.0)
    for r in (1, 3):
        best = np.sqrt((s[r:] ** 2).sum() / (s ** 2).sum())
        assert lowrank.best_rank_error(m, r) == pytest.approx(best, rel=1e-9)


def test_rank_sweep_warm_steps_approach_the_svd(m):
    rows = lowrank.rank_sweep(m, ranks=(1, 4), calls=10)
    for row in rows:
        assert row["best possible (SVD)"] <= row["after 10 warm steps"] + 1e-6 <= row["relative error"] + 1e-6
        assert row["after 10 warm steps"] == pytest.approx(row["best possible (SVD)"], abs=0.02)
        rows_, cols = m.shape
        assert row["R"] == pytest.approx(rows_ * cols * 4 / (4 * row["rank"] * (rows_ + cols) + 0), rel=0.05)
    assert rows[1]["relative error"] < rows[0]["relative error"]


def test_power_step_is_the_projection_onto_span_p(m):
    q = torch.randn(m.shape[1], 2, generator=torch.Generator().manual_seed(1))
    p, q_new = lowrank.power_step(m, q)
    torch.testing.assert_close(p.t() @ p, torch.eye(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(p @ q_new.t(), p @ p.t() @ m, atol=1e-6, rtol=1e-5)


def test_linearity_holds_for_p_and_not_for_topk():
    grads = lowrank.training_gradients(hidden=48, steps=3)
    lin = lowrank.linearity(grads, rank=2, ratio=0.05)
    assert lin["P: |sum_i M_i Q - (sum_i M_i) Q| / |.|"] < 1e-5
    assert lin["Top-K: |sum of packets - TopK(sum)| / |TopK(sum)|"] > 0.05
    assert lin["Top-K: positions kept by every worker"] < lin["Top-K: positions per worker"]


def test_warm_start_trace_and_step_cost():
    trace = lowrank.warm_start_trace(lowrank.training_gradients(hidden=48, steps=4), rank=2)
    assert all(b <= w + 1e-6 and b <= c + 1e-6 for w, c, b in zip(*trace.values()))
    link = cost.Link.gbit(25, 50e-6)
    pc = lowrank.step_cost([(512, 256)] * 3, workers=8, link=link, rank=4)
    assert pc["R"] == pytest.approx(512 * 256 / (4 * (512 + 256)))
    # two sequential all-reduces: each pays the ring latency 2 (N - 1) alpha
    assert pc["all-reduce of P s"] == pytest.approx(cost.ring_allreduce_time(4 * 512 * 4 * 3, 8, link))
    # the products and the ledger are priced too (CPU: scaled from one sampled matrix), beside a GPU's
    arithmetic = pc["orthonormalise s (this machine)"] + pc["products and ledger s (this machine)"]
    assert pc["PowerSGD total s"] == pytest.approx(pc["all-reduce of P s"] + pc["all-reduce of Q s"] + arithmetic)
    assert pc["products and ledger s (GPU, assumed)"] == pytest.approx(28 * 512 * 256 * 3 / 2e12)
    text = lowrank.step_cost_sentence(pc, 3, 8, link)
    assert "2000 GB/s" in text and "products" in text
    with pytest.raises(ValueError, match="matrix"):
        lowrank.spectrum(torch.ones(5))
    with pytest.raises(TypeError):
        lowrank.spectrum([[1.0]])


def test_a_hook_runs_on_a_fake_bucket():
    grads = [torch.randn(1000, generator=torch.Generator().manual_seed(i)) * 3 for i in range(4)]
    out = commhook.run_fake(_fp16_hook, grads)
    assert out["sent"] == [(torch.float16, 2000)] and out["bytes sent"] == 2000
    # reference: every worker's share rounded to fp16, summed in fp16
    ref = sum((g.to(torch.float16) / 4).to(torch.float16) if i == 0 else (g / 4).to(torch.float16)
              for i, g in enumerate(grads))
    torch.testing.assert_close(out["result"], ref.float(), rtol=0, atol=0)
    torch.testing.assert_close(out["result"], sum(grads) / 4, rtol=2e-3, atol=5e-3)
    with pytest.raises(TypeError, match="Future"):
        commhook.run_fake(lambda state, bucket: bucket.buffer(), grads)
    with pytest.raises(TypeError):
        commhook.FakeBucket(torch.ones(2, 2))
    bucket = commhook.FakeBucket(torch.ones(3), index=2, last=False)
    assert bucket.index() == 2 and not bucket.is_last() and "3" in repr(bucket)


def test_a_hook_source_must_define_the_function():
    with pytest.raises(ValueError, match="no function named"):
        commhook._compile("x = 1", "hook")


def test_dgc_ablation_trains_every_variant():
    torch.set_num_threads(1)
    runs = dgc.ablation(workers=2, steps=12, batch=4, epoch_steps=2, epochs=2, seeds=(0, 1),
                        variants=["dense SGD, momentum 0.9", "DGC, all four techniques", "DGC without warm-up",
                                  "DGC without momentum correction", "Top-K + ledger, optimizer momentum"])
    assert all(len(hs) == 2 for hs in runs.values())
    rows = {r["scheme"]: r for r in dgc.ablation_rows(runs)}
    assert rows["dense SGD, momentum 0.9"]["R (real packets)"] == pytest.approx(1.0)
    # equal bytes: the runs without the warm-up keep its average share, so they send as many values
    sent = {k: sum(sum(h.bytes_per_worker) for h in hs) for k, hs in runs.items()}
    assert sent["DGC without warm-up"] == pytest.approx(sent["DGC, all four techniques"], rel=0.15)
    assert runs["DGC without momentum correction"][0].config["momentum"] == 0.9
    assert runs["DGC, all four techniques"][0].config["momentum"] == 0.0
    text = dgc.verdict(runs)
    assert "warm-up:" in text and "momentum correction:" in text and "dense SGD" in text
    with pytest.raises(ValueError, match="unknown variant"):
        dgc.ablation(variants=["nope"])
    with pytest.raises(ValueError, match="shorter than the run"):
        dgc.ablation(steps=8, epoch_steps=2, epochs=4)


def _comparison():
    rows = [{"label": "dense", "step_ms": 100.0, "accuracy": 0.9, "comm_ms": 60.0, "speedup": 1.0},
            {"label": "sign", "step_ms": 50.0, "accuracy": 0.8, "speedup": 2.0, "comm_ms": 5.0},
            {"label": "int8", "step_ms": 120.0, "accuracy": 0.89, "speedup": 100 / 120, "comm_ms": 30.0}]
    return SimpleNamespace(rows=rows, where="emulated 1 Gbit/s link, gloo", workers=2, config={"steps": 30})


def test_ab_verdicts_follow_the_numbers():
    ab = _comparison()
    assert "sign was 2.00x faster than dense" in abtest.ab_verdict(ab)
    assert "sign" in abtest.behind_dense(ab) and "int8" not in abtest.behind_dense(ab)
    assert "10.0 points behind dense" in abtest.behind_dense(ab)
    fast = _comparison()
    text = abtest.loopback_verdict(fast, ab)      # the same dense step on both: not faster, said so
    assert "Slower than dense here: int8; faster: sign" in text and "load on this machine changed" in text
    fast.rows[1]["step_ms"] = 200.0
    assert "the best compressor is none" in abtest.loopback_verdict(fast, ab)
    slow = _comparison()
    slow.rows[0]["step_ms"] = 500.0
    assert "load on this machine changed" not in abtest.loopback_verdict(fast, slow)
    for r in ab.rows[1:]:
        r["step_ms"] = 150.0                      # every scheme slower: the verdict must not name a winner
    assert "No scheme's step was shorter than dense's" in abtest.ab_verdict(ab)
    lines = abtest.crossing_lines([1, 10, 100], {"gbit": [1, 10, 100], "a": [2.0, 1.5, 0.5], "b": [3, 2, 1.5]})
    assert "stops paying above" in lines[0] and "pays on every link tried" in lines[1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_knobs_sentence_counts_steps_from_one(lang):
    from milktea import i18n
    from milktea.experiments.powersgd_knobs import knobs_sentence
    out = {"PyTorch powerSGD_hook: bytes per step": [340, 340, 340, 10, 10], "start_powerSGD_iter": 3,
           "PyTorch PowerSGD: floats in the pickled state": 90, "PyTorch PowerSGD: parameters": 85}
    with i18n.speaking(lang):
        text = knobs_sentence(out)
        never = knobs_sentence(dict(out, **{"PyTorch powerSGD_hook: bytes per step": [340] * 5}))
    assert ("first 3 steps", "前 3 步")[lang == "zh"] in text and ("from step 4 on", "从第 4 步起")[lang == "zh"] in text
    assert ("never compressed", "从未压缩")[lang == "zh"] in never


def test_docstrings():
    for module in (lowrank, commhook):
        assert doctest.testmod(module).failed == 0
