"""The decision guide against hand-worked cases, and the scenarios built on it."""
import math

import pytest

from milktea import cost
from milktea.advice import BYTES_MOVED, CODEC_NAMES, advise, memory_bound_codecs, options

FREE = {n: 0.0 for n in CODEC_NAMES}


def test_dense_row_is_the_ring_allreduce():
    a = advise(25e6, 8, 10, 0.1, codec_ns=FREE, overlap=False)
    dense = a.rows[0]
    by_hand = 2 * 7 * 50e-6 + 2 * 7 / 8 * 100e6 / 1.25e9      # 2(N-1)a + 2(N-1)/N M/B
    assert dense["comm s"] == pytest.approx(by_hand)
    assert dense["step s"] == pytest.approx(0.1 + by_hand)
    assert a.ceiling == pytest.approx((0.1 + by_hand) / 0.1)


def test_fast_link_keeps_dense():
    # 25M params, 8 workers, 100 Gbit/s: comm = 0.7 ms + 14 ms = 14.7 ms against 0.2 s: 7%
    a = advise(25e6, 8, 100, 0.2, codec_ns=FREE)
    assert a.dense_comm_share == pytest.approx(0.0147 / 0.2147, rel=1e-3)
    assert a.choice == "dense"
    assert "under 10%" in a.reasons[1]


def test_slow_link_free_codecs_picks_simplest_near_best():
    # 1.3B params, 16 workers, 10 Gbit/s, 0.5 s compute, free codecs, overlap with 8 buckets:
    # dense comm = 2*15/16 * 5.2 GB / 1.25 GB/s = 7.8 s; PowerSGD (R=512) all-reduces 10 MB:
    # comm ~ 0.017 s, step = max(0.5, 0.017) + 0.017/8 ~ 0.502 s, within 10% of the fastest.
    a = advise(1.3e9, 16, 10, 0.5, codec_ns=FREE)
    rows = {r["scheme"]: r for r in a.rows}
    assert rows["dense"]["comm s"] == pytest.approx(30 * 50e-6 + 2 * 15 / 16 * 5.2e9 / 1.25e9)
    assert rows["powersgd"]["step s"] == pytest.approx(0.5 + rows["powersgd"]["comm s"] / 8)
    assert a.choice == "powersgd"
    # all-gathered int8 moves (N-1) M / 3.98: more than dense's 2(N-1)/N M
    assert rows["int8"]["speedup"] < 1


def test_codec_cost_can_make_dense_win():
    slow_codecs = {n: 1000.0 for n in CODEC_NAMES}       # 1 us per parameter
    a = advise(25e6, 8, 1, 0.1, codec_ns=slow_codecs)
    assert a.choice == "dense" or min(r["step s"] for r in a.rows[1:]) < a.rows[0]["step s"]
    assert all(r["speedup"] < 1 for r in a.rows[1:])


def test_bad_input_says_what_to_change():
    with pytest.raises(ValueError, match="workers must be >= 2, got 1"):
        advise(1e6, 1, 10, 0.1, codec_ns=FREE)
    with pytest.raises(TypeError, match="workers must be an int, got float"):
        advise(1e6, 4.0, 10, 0.1, codec_ns=FREE)
    with pytest.raises(ValueError, match="gbit must be > 0, got 0"):
        advise(1e6, 4, 0, 0.1, codec_ns=FREE)
    with pytest.raises(TypeError, match="gbit must be a number, got str"):   # a wrong type is a TypeError
        advise(1e6, 4, "10", 0.1, codec_ns=FREE)
    with pytest.raises(ValueError, match="codec_ns must give"):
        options({"bf16": 1.0})
    with pytest.raises(ValueError, match="'measure'"):
        advise(1e6, 4, 1, 0.1, codec_ns="fast")


def test_memory_bound_codecs():
    ns = memory_bound_codecs(1000.0)
    assert set(ns) == set(CODEC_NAMES)
    assert ns["bf16"] == pytest.approx(BYTES_MOVED["bf16"] / 1000.0)


def test_markdown_view():
    md = advise(25e6, 8, 1, 0.1, codec_ns=FREE)._repr_markdown_()
    assert md.startswith("**Choice:") and "| scheme |" in md


def test_scenarios_are_consistent():
    from milktea.experiments import scenarios
    f = scenarios.federated(params=5e6, up_mbit=10.0)
    assert f["dense upload s"] == pytest.approx(0.05 + 20e6 / 1.25e6)
    assert f["compressed MB"] == pytest.approx(f["update MB"] / f["ratio"])
    d = scenarios.cross_datacenter(codec_ns=FREE)
    assert d["dense exchange s"] == pytest.approx(cost.ring_allreduce_time(28e9, 2, cost.Link.gbit(100, 5e-3)))
    r = scenarios.cross_region_finetune(codec_ns=FREE)
    assert r["adapter dense step s"] < r["full dense step s"]
    assert math.isfinite(r["full best step s"])


def test_powersgd_is_priced_from_the_layer_shapes():
    from milktea.advice import powersgd_ratio, transformer_shapes
    free = {name: 0.0 for name in CODEC_NAMES}
    # brute force: the bytes of P and Q for every matrix, a vector sent whole
    shapes = [(512, 64), (64,), (10, 512), (10,)]
    dense = 512 * 64 + 64 + 10 * 512 + 10
    sent = 4 * (512 + 64) + 64 + 4 * (10 + 512) + 10
    assert powersgd_ratio(shapes, rank=4) == pytest.approx(dense / sent)
    small = advise(1e8, 16, 10, 0.5, codec_ns=free, layer_shapes=[(1024, 1024)] * 96)
    big = advise(1e8, 16, 10, 0.5, codec_ns=free, layer_shapes=[(8192, 8192)] * 2)
    r_small, r_big = (next(row["R"] for row in a.rows if row["scheme"] == "powersgd") for a in (small, big))
    assert r_small == pytest.approx(1024 / 8) and r_big == pytest.approx(8192 / 8)
    # without shapes: a transformer of that size, so wider models compress more
    shapes_1b = transformer_shapes(1e9)
    assert sum(m * n for m, n in shapes_1b) == pytest.approx(1e9, rel=0.1)
    assert powersgd_ratio(transformer_shapes(7e9)) > powersgd_ratio(transformer_shapes(1e8))
