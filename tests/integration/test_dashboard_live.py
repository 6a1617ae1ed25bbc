"""The dashboard's live run on worker processes: records stream in, tables and figures follow."""
import pytest

from milktea.experiments.dashboard import STAGES, Recorder


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
