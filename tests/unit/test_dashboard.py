"""The dashboard's records, tables and live run."""
import pytest

from milktea.experiments.dashboard import COMPLEXITY, Recorder


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
    warned = text.split("warning**")[1]
    assert "sign" in warned and "dense" not in warned and "rose from 2.10 to 5.67" in text
    assert "smaller learning rate" in text          # a run with no scheme name: no ledger to blame
    comp.results = comp.results[:1]
    assert "fell" in exp.loss_trend_sentence(comp) and "warning" not in exp.loss_trend_sentence(comp)


def test_loss_trend_advice_fits_each_scheme():
    from types import SimpleNamespace
    from milktea.experiments import dashboard as exp
    up = [{"loss": v} for v in (2.0, 2.1, 2.2, 3.0, 5.0, 9.0)]
    for name, advice in (("topk-approx", "momentum correction (the -mc"), ("topk-mc", "warms the sparsity up"),
                         ("int8", "smaller learning rate")):
        comp = SimpleNamespace(results=[{"label": name, "scheme": name, "records": up}])
        assert advice in exp.loss_trend_sentence(comp), name
