"""Per-layer gradient statistics and side-by-side runs on the character GPT."""
import json

import pytest
import torch

from milktea.experiments import gpt as xg
from milktea.tasks import CharGPT


@pytest.fixture(scope="module")
def task():
    return CharGPT(n_layer=1, n_head=2, n_embd=32, block=16, max_val_windows=32)


@pytest.fixture(scope="module")
def stats(task):
    return xg.gradient_stats(task, workers=4, batch=2, rank=2, warmup_steps=3)


def test_topr_energy_against_the_singular_values():
    eye = torch.eye(8)
    assert xg.topr_energy(eye, 2) == pytest.approx(2 / 8)
    g = torch.Generator().manual_seed(0)
    low = torch.randn(30, 3, generator=g) @ torch.randn(3, 20, generator=g)
    assert xg.topr_energy(low, 3) == pytest.approx(1.0) and xg.topr_energy(low, 1) < 1.0
    m = torch.randn(12, 7, generator=g, dtype=torch.float64)
    s = torch.linalg.svdvals(m)
    assert xg.topr_energy(m, 4) == pytest.approx(float((s[:4] ** 2).sum() / (m ** 2).sum()))


def test_embedding_rows_are_zero_exactly_for_characters_the_batch_never_saw(task):
    model = xg.warm_up(task, 2, batch=8)
    xb, yb = xg.worker_batches(task, 3, 2)
    grads = xg.worker_gradients(task, model, xb, yb)
    for w in range(3):
        seen = torch.zeros(task.cfg.vocab, dtype=torch.bool)
        seen[xb[w].unique()] = True
        zero_rows = (grads["wte.weight"][w] == 0).all(1)
        assert torch.equal(zero_rows, ~seen)              # unseen <=> zero, row by row
        assert not (grads["lm_head.weight"][w] == 0).all(1).any()   # the softmax touches every character
    union = torch.zeros(task.cfg.vocab, dtype=torch.bool)
    union[xb.unique()] = True
    assert torch.equal((grads["wte.weight"].sum(0) == 0).all(1), ~union)   # summed: only the union's gaps


def test_gradient_stats_sorts_the_layers(task, stats):
    assert len(stats.rows) == len(list(task.model().parameters()))
    assert sum(r["share of numbers"] for r in stats.rows) == pytest.approx(1.0)
    assert sum(r["share of norm^2"] for r in stats.rows) == pytest.approx(1.0)
    wte = stats.row("wte.weight")
    assert wte["kind"] == "sparse rows" and wte["zeros, summed"] <= wte["zeros, 1 worker"]
    assert wte["zeros, 1 worker"] == pytest.approx(wte["zero rows, 1 worker"])
    for r in stats.rows:
        if "ln_" in r["tensor"] or r["tensor"].endswith("bias"):
            assert r["kind"] == "tiny" and r["top-r energy"] is None, r
        if r["top-r energy"] is not None:
            assert 0 < r["random matrix"] < 1 and 0 < r["top-r energy"] <= 1 + 1e-9
    assert stats.row("lm_head.weight")["zeros, 1 worker"] == 0
    kinds = stats.by_kind()
    small = {n for n, p in task.model().named_parameters() if p.numel() < xg.TINY and n != "wte.weight"}
    assert {r["tensor"] for r in stats.rows if r["kind"] == "tiny"} == small      # LayerNorms, biases, wpe
    assert kinds["tiny"]["tensors"] == len(small) == 11 and kinds["tiny"]["share of numbers"] < 0.1
    text = stats.table()
    assert text.count("\n") == len(stats.rows) + 1 and "top-2 energy" in text
    assert "after 3 steps" in repr(stats)
    with pytest.raises(KeyError, match="no tensor"):
        stats.row("wte")
    with pytest.raises(TypeError, match="CharGPT"):
        xg.gradient_stats(object())


def test_side_by_side_runs_start_alike_and_report_the_wire_ratio(task):
    from milktea.compressors import TopK
    rows = xg.side_by_side(task, [("dense", None, False), ("Top-5%+EF", TopK(ratio=0.05), True)],
                           workers=2, steps=4, batch=2, eval_every=2)
    dense, topk = rows
    assert dense["history"].evals["loss"][0] == topk["history"].evals["loss"][0]   # same start
    assert dense["R"] == pytest.approx(1.0) and topk["R"] > 5
    assert dense["val loss"] < dense["history"].evals["loss"][0]
    assert "Top-5%+EF" in xg.runs_table(rows)
    assert [r[0] for r in xg.default_schemes()] == ["dense", "bf16", "Top-1%+EF, momentum corrected", "int8",
                                                   "Sign+EF, momentum corrected", "PowerSGD r4+EF"]
    # the biased schemes keep the momentum before the compressor: their optimizer has none
    assert [r[3] for r in xg.default_schemes()] == [None, None, 0.0, None, 0.0, None]
    rows = xg.side_by_side(task, xg.default_schemes()[4:5], workers=2, steps=2, batch=2)
    assert rows[0]["history"].config["momentum"] == 0.0


def test_bench_gpt_prints_every_scheme_and_the_layers(tmp_path, capsys, monkeypatch):
    from milktea.bench import __main__ as bench
    import milktea.bench.gpt as bg
    small = CharGPT(n_layer=1, n_head=2, n_embd=32, block=16, max_val_windows=16)
    monkeypatch.setattr(bg, "CharGPT", lambda seed=0: small)     # the bench's own model is larger
    out = tmp_path / "b.json"
    assert bench.main(["gpt", "--workers", "2", "--steps", "2", "--batch", "1", "--warmup", "1",
                       "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for label in ("dense", "Top-1%+EF, momentum corrected", "int8", "Sign+EF, momentum corrected", "PowerSGD r4+EF",
                  "sparse rows", "tiny"):
        assert label in text, label
    res = json.loads(out.read_text())
    assert [r["scheme"] for r in res["runs"]] == [r[0] for r in xg.default_schemes()] and len(res["layers"]) == 17


def test_transformer_mix_counts_what_the_model_holds():
    from milktea.experiments.scenarios import transformer_mix
    from milktea.gpt import GPT, GPTConfig
    cfg = GPTConfig(n_layer=3, n_head=2, n_embd=40, block=24)
    sizes = {n: p.numel() for n, p in GPT(cfg).named_parameters()}
    mix = transformer_mix(3, 40, cfg.vocab, 24, ratio=50.0)
    assert mix["params"] == sum(sizes.values()) and mix["tensors"] == len(sizes)
    small = [n for n in sizes.values() if n < 1024]
    assert mix["dense tensors"] == len(small) and mix["dense share"] == pytest.approx(sum(small) / mix["params"])
    assert mix["embedding share"] == pytest.approx(sizes["wte.weight"] / mix["params"])
    assert mix["embedding share"] + mix["matrix share"] + mix["dense share"] == pytest.approx(1.0)
    d = mix["dense share"]
    assert mix["effective ratio"] == pytest.approx(1 / (d + (1 - d) / 50))
    gpt2 = transformer_mix()
    assert 124e6 < gpt2["params"] < 164e6 and gpt2["effective ratio"] > 95    # dense LayerNorms cost little


def test_close_to_dense_keeps_runs_near_dense_that_did_not_diverge():
    rows = [{"scheme": "dense", "val loss": 2.0, "diverged": False},
            {"scheme": "a", "val loss": 2.15, "diverged": False},
            {"scheme": "b", "val loss": 2.3, "diverged": False},
            {"scheme": "c", "val loss": 1.9, "diverged": True}]
    assert [r["scheme"] for r in xg.close_to_dense(rows, tolerance=0.2)] == ["a"]
    assert [r["scheme"] for r in xg.close_to_dense(rows, tolerance=0.5)] == ["a", "b"]
