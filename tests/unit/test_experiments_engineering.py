"""The engineering chapter's computations against hand-worked references."""
import doctest
from types import SimpleNamespace

import pytest
import torch

from milktea import TopK, cost
from milktea import index as index_codec
from milktea.distributed import reprice
from milktea.experiments import accumulation, breakeven, indexcost
from milktea.experiments import overlap as ov


def test_buckets_close_at_the_cap():
    prof = ov.Profile([3 * 2**18, 2**18, 2**18, 2**18], [0.1, 0.2, 0.3, 0.4])   # 3 MB, then 1 MB each
    b = ov.buckets(prof, bucket_mb=2)
    assert [n for n, _ in b] == [3 * 2**20, 2 * 2**20, 2**20]
    assert [t for _, t in b] == pytest.approx([0.1, 0.5, 0.4])
    with pytest.raises(ValueError):
        ov.buckets(prof, 0)


def test_predicted_timeline_matches_hand_computation():
    prof = ov.Profile.uniform(4, 2**18, 0.4)          # 4 tensors of 1 MB, 0.1 s backward each
    link = cost.Link(2**20 / 0.05, 0.0)                 # 1 MB in 0.05 s
    tl = ov.predict_timeline(prof, 1, link, workers=2, forward_s=0.2)
    # 2 workers: ring all-reduce moves M per worker -> 0.05 s per bucket, each hidden but the last
    assert tl.total == pytest.approx(0.2 + 0.4 + 0.05)
    one = ov.predict_timeline(prof, 100, link, workers=2, forward_s=0.2)
    assert one.total == pytest.approx(0.2 + 0.4 + 0.2)


def test_bucket_sweep_has_an_interior_best():
    prof = ov.Profile.uniform(160, 25_000_000 // 160, 0.1)
    rows = ov.bucket_sweep(prof, cost.Link.gbit(25), 64, 0.05, sizes_mb=(0.5, 4, 16, 100))
    times = [r["step s"] for r in rows]
    assert times.index(min(times)) not in (0, len(times) - 1)


def flat(pairs):
    return [v for p in pairs for v in p]


def test_measured_timeline_from_stamps():
    step = {"forward": (10.0, 10.1), "end": 10.6, "buckets": [(10.3, 10.45), (10.4, 10.55)], "bytes": [8, 8]}
    tl = ov.measured_timeline(step)
    assert tl.forward == pytest.approx((0.0, 0.1))
    assert flat(tl.backward) == pytest.approx([0.1, 0.3, 0.3, 0.4])
    assert flat(tl.comm) == pytest.approx([0.3, 0.45, 0.45, 0.55])      # waits for the link
    assert tl.total == pytest.approx(0.6)
    pred = ov.predict_from_probe(step, cost.Link(8 / 0.1, 0.0), workers=2)
    assert flat(pred.backward) == pytest.approx([0.1, 0.3, 0.3, 0.4])
    assert pred.total == pytest.approx(0.3 + 0.1 + 0.1)
    merged = ov.predict_from_probe(step, cost.Link(8 / 0.1, 0.0), workers=2, merge=True)
    assert merged.total == pytest.approx(0.4 + 0.2)
    assert ov.median_step([step, dict(step, end=11.0), dict(step, end=10.2)], skip=0)["end"] == 10.6


def test_index_costs_are_exact_sizes():
    torch.manual_seed(0)
    x = torch.randn(20_000)
    rows = indexcost.index_costs(x, ratios=(0.01, 0.1), block=16)
    for r in rows:
        idx = TopK(r["ratio"]).select(x)[0]
        s = index_codec.sizes(idx, x.numel())
        assert r["int32 B/entry"] == 4.0
        assert r["varint B/entry"] == pytest.approx(s["varint"] / idx.numel())
        assert 0 < r["block16 norm kept"] <= r["top-k norm kept"] <= 1


def test_block_topk_keeps_whole_blocks():
    x = torch.zeros(100)
    x[40:44] = 5.0
    ids, flat = indexcost.block_topk(x, 0.04, block=4)
    assert ids.tolist() == [10] and flat.tolist() == [40, 41, 42, 43]


def test_escapes_count_large_gaps():
    x = torch.zeros(2000)
    x[[0, 1000, 1999]] = 1.0
    e = indexcost.escapes(x, 3 / 2000)
    assert e["largest gap"] == 999 and e["gaps >= 255"] == 2
    assert e["delta8 bytes"] == 3 + e["escape bytes"]


def test_speedup_and_breakeven_in_both_directions():
    s = breakeven.Scheme("top", 100.0, "allgather", overhead_s=0.01)
    [down] = breakeven.breakeven_gbits(s, 25_000_000, 0.1, 8)
    assert down.direction == "down"
    below = breakeven.speedup_vs_bandwidth([s], 25_000_000, 0.1, 8, [down.at / 2, down.at * 2])["top"]
    assert below[0] > 1 > below[1]
    # int8 gathered by 64 workers moves more bytes than the ring (R > N/2 fails): it loses on a
    # slow link, and wins on a fast one, where the gather's N-1 latency steps beat the ring's 2(N-1)
    few = breakeven.Scheme("int8", 4.0, "allgather")
    [up] = breakeven.breakeven_gbits(few, 25_000_000, 0.1, 64)
    assert up.direction == "up"
    around = breakeven.speedup_vs_bandwidth([few], 25_000_000, 0.1, 64, [up.at / 1.01, up.at * 1.01])["int8"]
    assert around[0] < 1 < around[1]
    # a brute-force scan finds a sign change exactly where the bisection put it
    grid = [1e-3 * 1.01 ** i for i in range(1900)]
    sp = breakeven.speedup_vs_bandwidth([few], 25_000_000, 0.1, 64, grid)["int8"]
    changes = [b for a, b, x, y in zip(grid, grid[1:], sp, sp[1:]) if (x < 1) != (y < 1)]
    assert len(changes) == 1 and changes[0] == pytest.approx(up.at, rel=0.011)


def test_accumulation_time_by_hand():
    rows = accumulation.accumulation_time(0.1, 0.4, [1, 4])
    assert rows[0]["s per micro-batch"] == pytest.approx(0.5)
    assert rows[1]["s per micro-batch"] == pytest.approx((0.4 + 0.4) / 4)


def test_accumulation_runs_send_fewer_bytes():
    from milktea.tasks import Digits
    runs = accumulation.accumulation_runs(Digits(hidden=8), accumulate=(1, 4), micro_batch=8, samples=256, workers=2)
    assert runs[0].exchanges == 4 * runs[1].exchanges
    assert runs[0].mb_per_worker == pytest.approx(4 * runs[1].mb_per_worker)


def test_docstrings():
    for module in (ov, indexcost, breakeven, accumulation, reprice):
        assert doctest.testmod(module).failed == 0


def _fake_comparison():
    from types import SimpleNamespace
    from milktea import cost
    compute = {"forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.001}

    def recs(kind, nbytes, codec, extra):
        return [{"ops": [(kind, nbytes)], "buckets": 1, "compress_s": codec, "decode_s": 0.0,
                 "compute": compute, "step_s": s} for s in extra]
    link = cost.Link.gbit(1.0, 50e-6)
    dense = recs("allreduce", 4e6, 0.0, [0.09, 0.1, 0.11])
    sign = recs("allgather", 1.25e5, 0.004, [0.05, 0.06, 0.07])
    return SimpleNamespace(results=[{"label": "dense", "records": dense}, {"label": "sign", "records": sign}],
                           skip=0, compute=compute, model_link=link, workers=2,
                           config={"batch": 32}), link


def test_repricing_on_the_runs_own_link_gives_the_measured_step():
    from milktea import cost
    from milktea.distributed.report import predict_step
    from milktea.experiments import dashboard
    comp, link = _fake_comparison()
    own = reprice.repriced_times(comp, link)
    assert own == pytest.approx({"dense": 0.1, "sign": 0.06})           # the measured medians
    pure = reprice.repriced_times(comp, link, keep_residual=False)
    rec = comp.results[1]["records"][0]
    assert pure["sign"] == pytest.approx(predict_step(comp.compute, rec, link, 2))
    # a faster link shortens dense more than sign; the two views (curves, table) agree
    curves = reprice.reprice(comp, [1.0, 100.0], latency=link.latency)
    assert curves["sign"][0] == pytest.approx(0.1 / 0.06) and curves["sign"][1] < curves["sign"][0]
    against_sign = reprice.reprice(comp, [1.0, 100.0], latency=link.latency, baseline="sign")
    assert against_sign["dense"][0] == pytest.approx(0.06 / 0.1) and "sign" not in against_sign
    with pytest.raises(ValueError, match="baseline"):
        reprice.reprice(comp, [1.0], baseline="nope")
    rows = dashboard.repriced(comp, 100.0)
    assert rows[1]["speedup"] == pytest.approx(curves["sign"][1])
    assert cost.Link.gbit(100.0).bandwidth > link.bandwidth


def test_repricing_with_other_codecs_and_a_negative_residual():
    from milktea.distributed.report import predict_step
    comp, link = _fake_comparison()
    # the sign codec swapped for a free one: on the run's own link, exactly its codec time less
    free = reprice.repriced_times(comp, link, codec={"sign": 0.0})
    assert free["sign"] == pytest.approx(0.06 - 0.004, abs=1e-9) and free["dense"] == pytest.approx(0.1)
    gpu = reprice.gpu_codecs(SimpleNamespace(results=[{"scheme": "sign-mc", "label": "s", "params": 10 ** 6},
                                                      {"scheme": "qsgd", "label": "q", "params": 10 ** 6}]), 1000.0)
    assert gpu == {"s": pytest.approx(12.25e6 / 1e12)}         # qsgd has no GPU model: left out
    with pytest.raises(ValueError, match="mem_gbps"):
        reprice.gpu_codecs(comp, 0)
    # a model that priced more than the run spent: re-priced on a fast link, the step never
    # drops below what it takes with no link at all (compute and codec)
    for r in comp.results[1]["records"]:
        r["step_s"] = 0.01
    fast = cost.Link.gbit(1000.0, 50e-6)
    t = reprice.repriced_times(comp, fast)["sign"]
    floor = predict_step(comp.compute, dict(comp.results[1]["records"][0], ops=[]), fast, 2)
    assert t == pytest.approx(floor) and t > 0



def test_protocols_by_workers_refuses_a_packet_no_smaller_than_the_gradient():
    from milktea.experiments.breakeven import protocols_by_workers
    with pytest.raises(ValueError, match="ratio must be > 1"):
        protocols_by_workers(1e6, 1.0)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        protocols_by_workers(1e6, 10.0, workers=(0,))
