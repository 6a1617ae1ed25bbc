"""Time to a target loss decides, not step time: a scheme with a short step that learns less
per step reaches the target later than the bf16 baseline, one that never reaches it is
slower or undecided by its lower bound, and the sentences say so in both languages. Also
the A/B test's words that follow from it (the shortest step's accuracy gap, the break-even
table with a GPU's codecs beside the CPU's), and the dashboard's stages beside the measured
step. Made-up runs (no processes): the words are under test."""
import pytest

from milktea import cost, i18n
from milktea.distributed.report import Comparison
from milktea.experiments import abtest, dashboard
from milktea.experiments import time_to_target as ttt
from milktea.timing import time_together


@pytest.fixture(params=["en", "zh"])
def lang(request):
    with i18n.speaking(request.param):
        yield request.param


def _run(scheme, label, step_s, loss, accuracy=0.9, codec=(0.0, 0.0), wire=4e6, comm=0.01):
    recs = [{"step_s": step_s * (1 + 0.01 * (t % 3)), "predicted_s": step_s, "payload_bytes": wire, "ratio": 4e6 / wire,
             "comm_s": comm, "compress_s": codec[0], "decode_s": codec[1], "loss": v, "predicted_comm_s": comm,
             "ops": [("allreduce", wire)], "buckets": 1} for t, v in enumerate(loss)]
    return {"scheme": scheme, "label": label, "records": recs, "final": {"loss": loss[-1], "accuracy": accuracy},
            "params": 1_000_000}


def _comparison(runs, steps=20):
    return Comparison(runs, cost.Link.gbit(1), {"forward_s": 0.005, "backward_s": 0.01, "optimizer_s": 0.001},
                      "emulated 1 Gbit/s link", 2, "gloo", {"steps": steps, "batch": 32}, floor_s=None)


def _falling(rate, n=20, start=2.0):
    return [start * (1 - rate) ** t for t in range(n)]


def _race():
    """bf16 learns at one pace; 'short' has the shortest step but learns slower, and does not get
    there within the run, which already took longer than bf16 needed; 'same' is bf16's twin;
    'stuck' never gets there."""
    return _comparison([_run("dense", "dense all-reduce", 0.060, _falling(0.10)),
                        _run("torch-bf16", "bf16", 0.040, _falling(0.10), codec=(0.002, 0.001)),
                        _run("sign-mc", "short", 0.035, _falling(0.07), accuracy=0.80, codec=(0.003, 0.001),
                             comm=0.001),
                        _run("int8", "same", 0.040, _falling(0.10)),
                        _run("topk-mc", "stuck", 0.045, [2.0] * 20, accuracy=0.5)])


def test_steps_and_smoothing():
    assert ttt.smoothed([4.0, 2.0, 0.0], window=2) == [4.0, 3.0, 1.0]
    assert ttt.steps_to_target([3.0, 2.0, 1.0, 0.5], 1.5, window=1) == 3
    assert ttt.steps_to_target([3.0, float("nan"), 0.1], 1.0, window=1) is None
    with pytest.raises(ValueError, match="window"):
        ttt.smoothed([1.0], window=0)


def test_the_shortest_step_arrives_later(lang):
    comp = _race()
    tt = ttt.time_to_target(comp)
    assert tt["baseline"] == "bf16" and tt["at step"] == 15
    rows = {r["scheme"]: r for r in tt["rows"]}
    assert rows["short"]["kind"] == "slower" and rows["same"]["kind"] == "same" and rows["stuck"]["kind"] == "slower"
    assert rows["stuck"]["steps to target"] is None
    text = ttt.sentence(tt)
    zh = lang == "zh"
    assert ("No scheme reached the target measurably sooner", "没有方案比")[zh] in text
    assert ("not reached", "没有达到")[zh] in text


def test_a_scheme_that_learns_as_fast_with_a_shorter_step_wins(lang):
    comp = _comparison([_run("dense", "dense all-reduce", 0.060, _falling(0.10)),
                        _run("torch-bf16", "bf16", 0.040, _falling(0.10)),
                        _run("powersgd-batched", "fast", 0.020, _falling(0.10))])
    tt = ttt.time_to_target(comp)
    fast = next(r for r in tt["rows"] if r["scheme"] == "fast")
    assert fast["kind"] == "faster" and fast["vs baseline"] == pytest.approx(2.0, rel=0.05)
    assert ("Reached the target soonest: fast", "最先达到目标的是 fast")[lang == "zh"] in ttt.sentence(tt)
    # too short a run to tell: not reached, but the whole run is shorter than the baseline needed
    comp = _comparison([_run("torch-bf16", "bf16", 0.040, _falling(0.10)),
                        _run("sign-mc", "early", 0.010, [2.0] * 20)])
    early = next(r for r in ttt.time_to_target(comp)["rows"] if r["scheme"] == "early")
    assert early["kind"] == "unknown"
    with pytest.raises(ValueError, match="baseline"):
        ttt.time_to_target(comp, baseline="nope")
    with pytest.raises(ValueError, match="share"):
        ttt.time_to_target(comp, at=0)


def test_the_shortest_step_is_said_with_its_gap(lang):
    text = abtest.ab_verdict(_race(), plot_note=False)
    zh = lang == "zh"
    assert ("The shortest step", "一步最短的方案")[zh] in text
    assert ("ends 10.0 points behind dense after 20 steps", "20 步之后它落后稠密方案 10.0 个百分点")[zh] in text
    level = _race()
    level.results[2]["final"]["accuracy"] = 0.89          # within 2 points of dense: nothing to add
    assert ("points behind", "百分点")[zh] not in abtest.ab_verdict(level, plot_note=False)


def test_the_break_even_table_gives_cpu_and_gpu_codecs(lang):
    comp = _race()
    gbits = [0.1 * 2 ** i for i in range(12)]
    rows = abtest.crossing_rows(comp, gbits)
    assert [r["scheme"] for r in rows] == [r["label"] for r in comp.results]
    dense, bf16 = rows[0], rows[1]
    here, gpu = abtest.CROSSING_COLUMNS[("fp32", "here")], abtest.CROSSING_COLUMNS[("bf16", "gpu")]
    assert dense[here] == "—" and bf16[gpu] == "—"
    assert all(r[c] for r in rows for c in abtest.CROSSING_COLUMNS.values())
    note = abtest.crossing_note(comp)
    assert "2000 GB/s" in note and ("3.0 ms", "3.0 ms")[lang == "zh"] in note


def test_stages_beside_the_measured_step(lang):
    from milktea import Sign
    comp = _race()
    stages = dashboard.stage_times(comp, "sign-mc", Sign(), repeats=2)
    by = {s["stage"]: s["seconds"] for s in stages}
    # compress and decode are the run's own codec times (compress less its encode share)
    assert by["compress"] + by["encode"] == pytest.approx(0.003) and by["decode"] == pytest.approx(0.001)
    text = dashboard.stage_sentence(comp, "sign-mc", stages)
    assert ("in no stage", "不属于任何环节")[lang == "zh"] in text
    short = _comparison([_run("dense", "dense all-reduce", 0.010, _falling(0.1), comm=0.05)])
    text = dashboard.stage_sentence(short, "dense", dashboard.stage_times(short, "dense"))
    assert ("overlapped the backward pass", "与反向传播重叠了")[lang == "zh"] in text


def test_the_evaluation_has_time_to_target():
    comp = _race()
    table = dashboard.evaluation(comp)
    rows = {r["scheme"]: r for r in table}
    assert rows["stuck"]["time to target s"] == "—" and rows["bf16"]["time to target s"] > 0
    rows = dashboard.repriced(comp, 10.0, tt=ttt.time_to_target(comp))
    assert all("time to target s" in r for r in rows)


def test_time_together_warms_up_and_takes_turns():
    calls = []
    times = time_together({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeat=3, warmup=2)
    assert calls == ["a", "a", "b", "b", "a", "b", "b", "a", "a", "b"]
    assert [len(v) for v in times.values()] == [3, 3]
    with pytest.raises(ValueError, match="at least one"):
        time_together({})
    with pytest.raises(ValueError, match="repeat"):
        time_together({"a": lambda: None}, repeat=0)
