"""The dashboard's records, tables and live run."""
import pytest

from milktea.experiments.dashboard import COMPLEXITY, STAGES, Recorder


def test_recorder_builds_series_from_messages():
    r = Recorder(batch=32, workers=2)
    r(0, ("start", "all schemes", 6))
    assert "waiting" in r.status
    for step, (t, wire) in enumerate([(0.1, 1e6), (0.05, 1e6), (0.04, 1e6)]):
        for label in ("dense all-reduce", "Sign+EF"):
            r(0, ("step", {"label": label, "step": step, "step_s": t, "loss": 2.0 - step, "wire_bytes": wire}))
    assert "6 of 6 steps" in r.status
    r(0, ("done",))
    s = r.series["dense all-reduce"]
    assert s["step"] == [1, 2, 3]
    assert s["throughput"] == pytest.approx([640, 1280, 1600])      # 64 samples per step
    assert s["latency_ms"] == pytest.approx([100, 50, 40])
    assert s["wire_mb"] == pytest.approx([1, 2, 3])
    assert r.done == ["dense all-reduce", "Sign+EF"] and r.updates == 8
    series, status = r.snapshot()
    assert series == r.series and series is not r.series and "2 schemes done" in status


def test_every_scheme_has_a_complexity():
    schemes = pytest.importorskip("milktea.distributed.schemes")
    assert set(schemes.SCHEMES) <= set(COMPLEXITY)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_live_run_streams_records_and_tables():
    pytest.importorskip("milktea.distributed.compare")
    from milktea import Sign
    from milktea.experiments import dashboard as exp
    seen = []
    rec = Recorder(batch=16, workers=2)

    def on_record(rank, msg):
        seen.append(msg[0])
        rec(rank, msg)

    result = exp.live_run(["dense", "sign"], on_record, steps=5, hidden=64, batch=16, link_gbit=1.0)
    assert seen.count("step") == 10 and seen.count("start") == 1 and seen[-1] == "done"
    assert [len(s["step"]) for s in rec.series.values()] == [5, 5]
    table = exp.evaluation(result)
    assert [r["complexity"] for r in table] == [0, 4]
    slow, fast = exp.repriced(result, 0.01), exp.repriced(result, 100.0)
    assert slow[0]["step ms"] > fast[0]["step ms"]            # dense is link-bound on 10 Mbit/s
    assert slow[1]["speedup"] > fast[1]["speedup"]            # compression pays more on slow links
    stages = exp.stage_times(result, "sign", Sign())
    assert [s["stage"] for s in stages] == list(STAGES)
    assert all(s["seconds"] >= 0 for s in stages)
    with pytest.raises(ValueError, match="no finished run"):
        exp.stage_times(result, "topk")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_live_run_takes_a_train_config_and_trains_the_gpt():
    pytest.importorskip("milktea.distributed.compare")
    from milktea.distributed.train import TrainConfig
    from milktea.experiments import dashboard as exp
    steps = []
    result = exp.live_run(["dense", "topk"], lambda rank, msg: steps.append(msg[1]) if msg[0] == "step" else None,
                          TrainConfig(task="gpt", steps=3, batch=4, lr=0.1, link_gbit=None))
    assert [r["scheme"] for r in result.rows] == ["dense", "topk"]
    assert all("error" not in r for r in result.rows), result.rows
    assert result.config["task"] == "gpt" and len(steps) == 6
    assert all(s["scheme"] in ("dense", "topk") for s in steps)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_dashboard_redraws_while_training():
    pytest.importorskip("milktea.distributed.compare")
    from milktea.widgets.dashboard import Dashboard
    # a slow link and a few hundred kB per step: the run lasts long enough to be watched
    d = Dashboard(["dense", "sign"], steps=20, hidden=1024, link_gbit=0.1, redraw_s=0.05)
    draws = []
    original = d._draw

    def counting():
        draws.append(len(d.recorder.snapshot()[0]) if d.recorder else 0)
        original()
    d._draw = counting
    before = d.whatif_out.outputs
    d.run(batch=16)
    assert len(draws) >= 4                        # before, during (more than once), after
    assert any(0 < n for n in draws[1:-1])        # some redraw saw records mid-run
    assert "2 schemes trained" in d.header.value
    assert d.whatif_out.outputs != before         # the what-if view now re-prices the run
    old = d.whatif_out.outputs
    d.whatif.value = 10.0
    assert d.whatif_out.outputs != old


def test_loss_trends_name_a_diverging_scheme():
    from types import SimpleNamespace
    from milktea.experiments import dashboard as exp
    up = [{"loss": v} for v in (2.0, 2.1, 2.2, 3.0, 5.0, 9.0)]
    down = [{"loss": v} for v in (2.3, 2.0, 1.8, 1.0, 0.9, 0.8)]
    nan = [{"loss": v} for v in (2.3, 1.0, float("nan"), 0.5)]
    comp = SimpleNamespace(results=[{"label": "dense", "records": down}, {"label": "sign", "records": up},
                                    {"label": "nan", "records": nan}, {"label": "failed", "error": "x"}])
    rows = {r["scheme"]: r for r in exp.loss_trends(comp)}
    assert rows["dense"]["diverging"] is False and rows["sign"]["diverging"] is True
    assert rows["nan"]["diverging"] is True and "failed" not in rows
    assert rows["sign"]["first loss"] == pytest.approx(2.1) and rows["sign"]["last loss"] == pytest.approx(17 / 3)
    text = exp.loss_trend_sentence(comp)
    assert "sign" in text and "dense" not in text
    comp.results = comp.results[:1]
    assert "fell" in exp.loss_trend_sentence(comp)
