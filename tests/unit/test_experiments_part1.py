"""The computations behind chapters 00-04, checked against brute force and the formulas."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from milktea import cost, index
from milktea.compressors import Cast, Chain, Identity, Quantize, RandomK, Sign, TopK
from milktea.experiments import bottleneck as B
from milktea.experiments import compression as C
from milktea.experiments import ledger as L
from milktea.experiments import topk as T
from milktea.experiments.gradients import flat_gradient, layer_gradients


# -- bottleneck ---------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(st.integers(1, 7), st.integers(1, 40), st.integers(0, 10_000))
def test_ring_allreduce_sums_and_counts_bytes(n, size, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(size).astype(np.float32) for _ in range(n)]
    run = B.ring_allreduce(arrays)
    want = np.sum(np.stack(arrays).astype(np.float64), axis=0)
    for r in run.result:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-5)
    assert run.steps == 2 * (n - 1)
    # every worker sends 2(N-1) chunks; in total that is 2(N-1)/N * M per worker on average
    assert run.bytes_sent.sum() == pytest.approx(n * cost.ring_allreduce_bytes(4 * size, n))


def test_ring_allreduce_divisible_case_matches_formula_exactly():
    run = B.ring_allreduce([np.full(60, i, dtype=np.float32) for i in range(6)])
    assert run.bytes_sent.tolist() == [cost.ring_allreduce_bytes(240, 6)] * 6 == [400] * 6
    # every step every worker sends exactly one message, to its right-hand neighbour
    assert all(sorted(m[0] for m in step) == list(range(6)) for step in run.log)
    assert all(j == (i + 1) % 6 for step in run.log for i, j, _ in step)


def test_ring_allreduce_rejects_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        B.ring_allreduce([np.ones(3), np.ones(4)])
    with pytest.raises(ValueError, match="non-empty"):
        B.ring_allreduce([])


def test_breakdown_matches_the_cost_model_and_the_seed():
    b = B.breakdown(175e9, 64, 100, 0.2)
    assert b.grad_bytes == 700e9
    link = cost.Link.gbit(100)
    assert b.comm_ring == cost.ring_allreduce_time(700e9, 64, link)
    assert b.comm_ps == cost.parameter_server_time(700e9, 64, link)
    assert b.waiting == pytest.approx(b.comm_ring / (b.comm_ring + 0.2))
    assert B.waiting_share(0.2, 3.0) == pytest.approx(0.9375)
    assert "waiting" in repr(b)


def test_gradient_table_and_scaling():
    rows = B.gradient_table(workers=64, gbits=(25,))
    gpt3 = next(r for r in rows if r["model"] == "GPT-3")
    assert gpt3["fp32 gradient (GB)"] == pytest.approx(700)
    assert gpt3["ring bytes per worker (GB)"] == pytest.approx(2 * 63 / 64 * 700)
    assert gpt3["all-reduce at 25 Gbit/s (s)"] == pytest.approx(cost.ring_allreduce_time(700e9, 64, cost.Link.gbit(25)))
    sc = B.scaling(1e6, [2, 4, 8], cost.Link(1e6))
    assert sc["ps_bytes"].tolist() == [4e6, 8e6, 16e6]
    assert np.allclose(sc["ring_bytes"], [1e6, 1.5e6, 1.75e6])
    assert (np.diff(sc["ps_time"]) > 0).all()


def test_phone_night_is_the_cost_model_in_story_units():
    night = B.phone_night(64, 5000, 0.5)
    assert night.ring_hours == pytest.approx(2 * 63 / 64 * 5000 / 0.5 / 3600)
    assert night.head_office_hours == pytest.approx(2 * 64 * 5000 / 0.5 / 3600)
    with pytest.raises(ValueError):
        B.phone_night(0)


def test_fit_link_recovers_a_known_link():
    link = cost.Link(2e9, 30e-6)
    sizes = list(B.DEFAULT_SIZES)
    times = [cost.ring_allreduce_time(s, 4, link) for s in sizes]
    fit = B.fit_link(sizes, times, 4)
    assert fit.bandwidth == pytest.approx(2e9, rel=1e-6) and fit.latency == pytest.approx(30e-6, rel=1e-6)
    # times that do not grow with size: the fallback still returns a physical link
    fit = B.fit_link([1000, 2000], [1e-3, 1e-3], 2)
    assert fit.bandwidth > 0 and fit.latency >= 0


def test_seconds_in_words():
    assert B.seconds(0.0123) == "12.3 ms"
    assert B.seconds(90) == "1.5 min"
    assert B.seconds(3 * 86400) == "3 days"


# -- compression --------------------------------------------------------------------------

def test_lossless_ratios():
    assert C.lossless(torch.zeros(10_000) + 1.0)["zlib"] > 50        # a constant compresses well
    r = C.lossless(torch.randn(10_000, generator=torch.Generator().manual_seed(0)))
    assert all(0.9 < v < 1.3 for v in r.values())                     # random floats barely do
    with pytest.raises(ValueError, match="codec"):
        C.lossless(torch.ones(3), ("rar",))


def test_measure_against_references():
    g = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    m = C.measure(Identity(), g)
    assert m.rel_error == 0 and m.cosine == pytest.approx(1) and m.ratio < 1   # header bytes
    k = 50
    m = C.measure(TopK(k=k), g)
    x = g.double().numpy()
    top = np.sort(np.abs(x))[-k:]
    energy = (top ** 2).sum() / (x ** 2).sum()
    assert m.energy == pytest.approx(energy)
    assert m.cosine == pytest.approx(math.sqrt(energy))
    assert m.rel_error == pytest.approx(math.sqrt(1 - energy))
    assert m.wire_bytes == len(TopK(k=k).compress(g).to_bytes())
    assert m.family == "sparsify" and C.measure(Quantize(8), g).family == "quantize"
    with pytest.raises(TypeError, match="Compressor"):
        C.measure("topk", g)
    with pytest.raises(ValueError, match="zeros"):
        C.measure(Identity(), torch.zeros(4))


def test_build_scheme_covers_both_families():
    assert isinstance(C.build_scheme(1.0, 32), Identity)
    assert isinstance(C.build_scheme(1.0, 16), Cast)
    assert isinstance(C.build_scheme(1.0, 1), Sign)
    assert isinstance(C.build_scheme(0.1, 32), TopK)
    assert isinstance(C.build_scheme(0.1, 32, "randomk"), RandomK)
    c = C.build_scheme(0.1, 4)
    assert isinstance(c, Chain) and isinstance(c.second, Quantize) and c.second.bits == 4
    with pytest.raises(ValueError, match="bits"):
        C.build_scheme(0.1, 3)
    with pytest.raises(ValueError, match="sparsifier"):
        C.build_scheme(0.1, 8, "bottomk")


def test_tradeoff_is_ordered_and_stacking_helps():
    g = flat_gradient()
    curves = C.tradeoff(g)
    topk = curves["Top-K"]
    assert all(a.ratio < b.ratio and a.rel_error <= b.rel_error for a, b in zip(topk, topk[1:]))
    for plain, stacked in zip(topk, curves["Top-K + int8"]):
        assert stacked.ratio > plain.ratio
    # Top-K keeps more of the gradient than Random-K at the same k
    for t, r in zip(topk, curves["Random-K"]):
        assert t.rel_error < r.rel_error


def test_exchange_times_formulas():
    link = cost.Link(1e9, 0)
    d = C.exchange_times(1e9, 8, [2, 8, 64], link)
    assert np.allclose(d["dense all-reduce"], [cost.ring_allreduce_time(1e9, n, link) for n in (2, 8, 64)])
    assert np.allclose(d["compressed all-gather"], [(n - 1) * 1e9 / 8 / 1e9 for n in (2, 8, 64)])
    assert d["compressed all-gather"][-1] > d["dense all-reduce"][-1]     # at 64 workers gathering loses


def test_received_is_one_roundtrip():
    g = torch.randn(300, generator=torch.Generator().manual_seed(2))
    x, y = C.received(TopK(k=10), g)
    assert np.count_nonzero(y) == 10 and np.allclose(x[y != 0], y[y != 0])


# -- Top-K --------------------------------------------------------------------------------

def test_selectors_agree_with_brute_force():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(3))
    k = 500
    want = set(np.argsort(-np.abs(x.numpy()))[:k].tolist())
    sel = T.selectors(k)
    for name in ("full sort", "partition", "torch.topk"):
        assert set(sel[name](x).tolist()) == want, name
    approx = sel["sampled threshold"](x)
    assert abs(approx.numel() - k) <= 0.05 * k
    # whatever it keeps is the top of the tensor: nothing left out is bigger than what is kept
    keep = torch.zeros(x.numel(), dtype=torch.bool)
    keep[approx] = True
    assert x[~keep].abs().max() <= x[keep].abs().min()


def test_time_selection_reports_every_selector():
    t = T.time_selection((1000, 4000), density=0.05, repeats=1, device="cpu")
    assert set(t.times) == {"full sort", "partition", "torch.topk", "sampled threshold"}
    assert all(len(v) == 2 and min(v) > 0 for v in t.times.values())
    assert t.counts["torch.topk"] == [50, 200]
    assert len(t.speedup("torch.topk")) == 2


def test_index_cost_is_exact():
    g = flat_gradient()
    rows = T.index_cost(g, densities=(0.001, 0.05, 0.5))
    for r in rows:
        idx = TopK(k=r["k"]).select(g)[0]
        for enc in index.ENCODINGS:
            assert r[f"{enc} bytes"] == index.encode(idx, g.numel(), enc)[1].numel()
        packet = TopK(k=r["k"]).compress(g)
        assert r["packet bytes"] == len(packet.to_bytes())
        assert r[f"{r['encoding']} bytes"] == min(r[f"{e} bytes"] for e in index.ENCODINGS)
        assert r["value bytes"] == 4 * r["k"]
    assert rows[-1]["encoding"] == "bitmap" and rows[0]["encoding"] != "bitmap"


def test_norm_share_against_brute_force():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4)) ** 3
    s, share = T.norm_share_curve(x)
    sq = np.sort(x.double().numpy() ** 2)[::-1]
    assert np.allclose(share, np.cumsum(sq) / sq.sum())
    assert s[0] == 1 / 1000 and share[-1] == pytest.approx(1)
    s2, share2 = T.norm_share_curve(x, points=20)
    assert len(s2) <= 20 and np.all(np.diff(share2) >= 0)
    at = T.share_at(x, [0.01])
    assert at[0.01] == pytest.approx(sq[:10].sum() / sq.sum())
    with pytest.raises(ValueError, match="zeros"):
        T.norm_share_curve(torch.zeros(5))


def test_randomk_keeps_about_s_of_the_energy():
    x = torch.randn(20_000, generator=torch.Generator().manual_seed(5))
    assert T.randomk_energy(x, 0.1, trials=10) == pytest.approx(0.1, abs=0.01)


def test_topk_view_reference():
    w = layer_gradients()["0.weight"]
    v = T.topk_view(w, 100)
    a = w.abs().numpy()
    assert v.kept.shape == a.shape and v.kept.sum() == 100
    assert a[v.kept].min() >= a[~v.kept].max()
    assert v.threshold == pytest.approx(a[v.kept].min())
    assert v.energy == pytest.approx((a[v.kept] ** 2).sum() / (a ** 2).sum(), rel=1e-5)
    assert v.packet_bytes == len(TopK(k=100).compress(w).to_bytes())


def test_layer_gradients_are_real_and_cached_copies():
    g1 = layer_gradients()
    g1["0.weight"].zero_()
    g2 = layer_gradients()
    assert g2["0.weight"].abs().sum() > 0
    assert flat_gradient().numel() == sum(v.numel() for v in g2.values())
    with pytest.raises(ValueError):
        layer_gradients(hidden=0)


# -- the ledger ---------------------------------------------------------------------------

def test_ledger_trace_invariants():
    names, grads = L.shop_adjustments(10)
    tr = L.ledger_trace((names, grads), k=2)
    assert np.allclose(tr.sent.cumsum(0) + tr.after, grads.cumsum(0))       # nothing is lost
    assert np.allclose(tr.before[1:], tr.after[:-1]) and not tr.before[0].any()
    assert all(np.count_nonzero(row) == 2 for row in tr.sent)
    for g, s in zip(grads, tr.sent_plain):          # without a ledger: top-2 of tonight alone
        top = np.argsort(-np.abs(g))[:2]
        assert np.allclose(s[top], g[top]) and np.count_nonzero(s) == 2
    # the small steady item is never heard without the ledger, and fully heard with it
    assert tr.delivered("ice", ledger=False)[-1] < 0.5 * tr.truth("ice")[-1]
    assert tr.delivered("ice")[-1] + tr.after[-1, names.index("ice")] == pytest.approx(tr.truth("ice")[-1])
    assert tr.night(0)["night"] == 1
    with pytest.raises(ValueError, match="night"):
        tr.night(10)
    with pytest.raises(KeyError, match="items"):
        tr.truth("coffee")


def test_ledger_trace_rejects_bad_input():
    with pytest.raises(ValueError, match="nights, items"):
        L.ledger_trace(np.ones(5))
    with pytest.raises(ValueError, match="out of range"):
        L.ledger_trace(np.ones((3, 4)), k=5)


def test_story_index_costs():
    rows = {r["encoding"]: r for r in L.story_index_costs()}
    assert rows["the manager's estimate (1-byte index)"]["saving"] == pytest.approx(8.0)
    # reference: one real packet of 100 of 1000 entries with each encoding
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert rows["int32"]["bytes per step"] == TopK(k=100, index="int32").compress(x).nbytes
    assert rows["bitmap"]["bytes per step"] == TopK(k=100, index="bitmap").compress(x).nbytes
    assert rows["delta8"]["saving"] < 8.0            # a header and escapes: a little less than 8x
    assert L.bits_to_address(1000) == 10 and L.bits_to_address(256) == 8 and L.bits_to_address(1) == 1


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 300), st.data())
def test_topk_is_a_k_contraction(n, data):
    k = data.draw(st.integers(1, n))
    x = torch.tensor(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n)), dtype=torch.float64)
    left, right = L.contraction(x, k)
    assert left <= right + 1e-9 * max(1.0, right)


@pytest.mark.timeout(120)
def test_compare_feedback_runs_three_schemes():
    runs = L.compare_feedback(workers=4, steps=30, progress=False)
    assert list(runs) == ["dense", "Top-K + ledger", "Top-K, no ledger"]
    assert all(h.steps == 30 for h in runs.values())
    assert runs["Top-K + ledger"].config["error_feedback"] and not runs["Top-K, no ledger"].config["error_feedback"]
    assert runs["Top-K + ledger"].ratio > 10
    assert torch.get_num_threads() >= 1


@pytest.mark.parametrize("name", ["milktea.experiments.bottleneck", "milktea.experiments.compression",
                                  "milktea.experiments.topk", "milktea.experiments.ledger",
                                  "milktea.experiments.tables", "milktea.experiments.gradients",
                                  "milktea.widgets"])
def test_docstring_examples_part1(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_averaged_error_random_k_is_unbiased_top_k_is_not():
    g = torch.randn(2000, generator=torch.Generator().manual_seed(6))
    d = T.averaged_error(g, 0.05, draws=(1, 16, 256))
    assert d["Random-K (scaled)"][0] > d["Random-K (scaled)"][1] > d["Random-K (scaled)"][2]
    assert len(set(d["Top-K"])) == 1
    top = TopK(k=100)
    assert d["Top-K"][0] == pytest.approx(float((top.decompress(top.compress(g)) - g).norm() / g.norm()), rel=1e-6)


def test_markdown_table():
    from milktea.experiments.tables import markdown_table
    text = markdown_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": 3.0}], formats={"a": "{:03d}"})
    assert text.splitlines() == ["| a | b |", "| --- | --- |", "| 001 | 0.123 |", "| 002 | 3 |"]
    with pytest.raises(ValueError, match="at least one row"):
        markdown_table([])
    with pytest.raises(ValueError, match="not shown"):
        markdown_table([{"a": 1}], formats={"z": "{}"})
