"""Every figure the library draws speaks the reader's language: each plotting function of
milktea.plots (and the figures of compare()'s report), drawn in Chinese on an off-screen
canvas with small real inputs, shows no English word in any text (titles, axis labels, tick
labels, legends, annotations), by the allow-list of tests/course/zh_scan.py (scheme, library
and unit names stay). The executed Chinese chapters are scanned the same way, figure by
figure (tests/course/test_notebooks.py); this test finds a plotting function's English
without running a chapter, and fails when a new plotting function is not drawn here.

Every scheme's name, as tables, figures and sentences show it (milktea.tables.word), is
checked too: Chinese, without a comma of its own outside brackets (a qualifier goes in
brackets, so that a list of names joined by 、 reads one item per name), without nested brackets.
"""
import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from milktea import i18n

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("zh_scan", ROOT / "tests" / "course" / "zh_scan.py")
zh_scan = importlib.util.module_from_spec(_spec)
sys.modules["zh_scan"] = zh_scan
_spec.loader.exec_module(zh_scan)

G = torch.Generator().manual_seed(0)


@pytest.fixture(scope="module", autouse=True)
def chinese_font():
    """Chinese glyphs for the figures (what use("zh") sets up); the language itself is chosen per test."""
    before = i18n.language()
    i18n.use("zh")
    with i18n.speaking("en"):
        yield
    i18n.use(before)


def _fig():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 4), dpi=40)
    FigureCanvasAgg(fig)
    return fig


@lru_cache(maxsize=None)
def _grad():
    return torch.randn(4096, generator=torch.Generator().manual_seed(0)) * torch.rand(4096, generator=G) ** 4


@lru_cache(maxsize=None)
def _digits_runs():
    """Chapter 05's runs as the simulator names them (dense, sign, sign+ef, int4-stoch+ef,
    approx-topk-1%+int8+ef), with made-up curves: the figures' words are under test, not training."""
    from milktea import Chain, Quantize, Sign, TopK
    from milktea.simulate import History
    runs = [(None, False), (Sign(), False), (Sign(), True), (Quantize(4, stochastic=True), True),
            (Chain(TopK(0.01, approximate=True), Quantize(8)), True)]
    return [History("digits", "dense" if c is None else c.name + ("+ef" if ef else ""), 2, loss=[2.3, 1.9, 1.5, 1.2],
                    eval_steps=[0, 2, 4], evals={"accuracy": [0.1, 0.5 + 0.05 * i, 0.8], "loss": [2.3, 1.6, 1.1]},
                    bytes_sent=[[1000 // (1 + i)] * 2 for _ in range(4)], dense_bytes=1000)
            for i, (c, ef) in enumerate(runs)]


def _scheme_results():
    """compare()'s results for every built-in scheme, with made-up timings (no processes)."""
    from milktea.distributed import schemes
    out = []
    for i, name in enumerate(schemes.SCHEMES):
        step = 0.02 / (1 + 0.1 * i)
        recs = [{"step_s": step, "predicted_s": 0.9 * step, "payload_bytes": 4e6 / (1 + i), "ratio": 1.0 + i,
                 "comm_s": step / 3, "compress_s": 1e-3, "decode_s": 1e-3, "loss": 2.0 - 0.1 * t,
                 "predicted_comm_s": step / 4, "ops": [("allreduce", 4e6 / (1 + i))], "buckets": 1}
                for t in range(6)]
        out.append({"scheme": name, "label": schemes.label(name), "records": recs,
                    "final": {"loss": 0.4, "accuracy": 0.9 - 0.01 * i}, "params": 1_000_000})
    return out


@lru_cache(maxsize=None)   # keyed by the language: the description of the link is written in it
def _comparison(language="zh"):
    from milktea import cost
    from milktea.distributed.report import Comparison
    where = (i18n._("emulated {gbit:g} Gbit/s link, {us:g} us latency").format(gbit=1, us=50) + i18n._(", ")
             + i18n._("one scheme after another"))   # as compare() writes it, in the language spoken now
    return Comparison(_scheme_results(), cost.Link.gbit(1), {"forward_s": 1e-3, "backward_s": 2e-3, "optimizer_s": 5e-4},
                      where, 2, "gloo", {"steps": 6, "batch": 8})


# ---------------------------------------------------------------- one drawing per plotting function

def _bottleneck(name):
    from milktea import cost
    from milktea.experiments import bottleneck as bn
    from milktea.plots import bottleneck as p
    ax = _fig().subplots()
    if name == "breakdown_bars":
        p.breakdown_bars(bn.breakdown(1.5e9, 64, 25, 0.2), ax)
    elif name == "gradient_sizes":
        p.gradient_sizes(bn.gradient_table(workers=64, gbits=(25, 400)), ax)
    elif name == "ring_bytes":
        p.ring_bytes([2, 3, 4], [1.0, 1.33, 1.5], [1.0, 1.33, 1.5], ax)
    elif name == "scaling_plot":
        p.scaling_plot(bn.scaling(6e9, [2, 4, 8], cost.Link.gbit(25)), ax)
    elif name == "allreduce_measured":
        sizes = [1024, 65536, 1 << 20]
        m = bn.AllReduceMeasurement(sizes, [1e-4, 5e-4, 5e-3], 2, "gloo", cost.Link.gbit(5), True)
        p.allreduce_measured(m, ax)
    elif name == "phone_night_bars":
        p.phone_night_bars(bn.phone_night(), ax)
    elif name == "scissors":
        p.scissors(bn.scissors(10), ax)
    return ax.figure


def _compression(name):
    from milktea import cost
    from milktea.experiments import compression as cx
    from milktea.plots import compression as p
    g = _grad()
    ax = _fig().subplots()
    if name == "tradeoff_plot":
        curves = cx.tradeoff(g, ratios=(0.1, 0.01))
        p.tradeoff_plot(curves, ax, highlight=cx.measure(cx.build_scheme(0.1, 8), g))
    elif name == "ratio_bars":
        table = cx.scheme_table(g)
        p.ratio_bars(cx.lossless(g[:512]), [m for m in table if m.family != "none"], ax)
    elif name == "exchange_plot":
        p.exchange_plot(cx.exchange_times(1.6e9, 8, [2, 4, 8], cost.Link.gbit(25)), 8, ax)
    elif name == "received_plot":
        orig, back = cx.received(cx.build_scheme(0.1, 4, "randomk"), g)
        p.received_plot(orig, back, ax, title=i18n._("every entry, {scheme}").format(scheme="Random-K"))
    return ax.figure


def _topk(name):
    from milktea.experiments import topk as tx
    from milktea.plots import topk as p
    g = _grad()
    fig = _fig()
    if name == "selection_plot":
        p.selection_plot(tx.time_selection(sizes=(1000, 2000), repeats=1), fig.subplots())
    elif name == "index_cost_plot":
        p.index_cost_plot(tx.index_cost(g, densities=(0.01, 0.1)), fig.subplots())
    elif name == "norm_share_plot":
        p.norm_share_plot({"digits 梯度（所有层）": tx.norm_share_curve(g, points=20),   # the chapter's own names
                           "同样大小的高斯噪声": tx.norm_share_curve(torch.randn(4096, generator=G), points=20)},
                          fig.subplots(), mark=0.01)
    elif name == "layer_kept":
        layer = torch.randn(16, 64, generator=G)   # a weight gradient's shape (the widget's default trains a model)
        p.layer_kept(layer.abs().numpy(), tx.topk_view(layer, 20), fig.subplots(1, 2))
    elif name == "averaged_error_plot":
        p.averaged_error_plot(tx.averaged_error(g, 0.01, draws=(1, 4)), fig.subplots())
    return fig


def _ledger(name):
    from milktea.experiments import ledger as lx
    from milktea.plots import ledger as p
    from milktea.simulate import History
    fig = _fig()
    if name == "ledger_night":
        p.ledger_night(lx.ledger_trace(), 2, fig.subplots(1, 2))
    elif name == "story_curves":
        p.story_curves(lx.story_demo(steps=5), fig.subplots())
    elif name == "ef21_curves":
        p.ef21_curves(lx.ef21_case(seeds=range(2), steps=20, workers=2, n_params=20, k=2), fig.subplots())
    elif name == "feedback_runs":
        runs = _digits_runs()
        p.feedback_runs({"dense": runs[0], "Top-K + ledger": runs[2], "Top-K, no ledger": runs[1]}, fig.subplots(1, 2))
    elif name == "dgc_ablation":
        from milktea.experiments import dgc
        runs = {n: [History("gpt", n, 2, loss=[3.0, 2.5], eval_steps=[0, 2], evals={"loss": [3.0, 2.0 + 0.1 * i]})]
                for i, n in enumerate(dgc.VARIANTS)}   # the ablation's run names, no training
        p.dgc_ablation(runs, fig.subplots())
    return fig


def _quantization(name):
    from milktea.experiments import quantization as qx
    from milktea.plots import quantization as p
    g = _grad()
    fig = _fig()
    if name == "half_step":
        p.half_step(qx.half_step_check(g, bits=(8, 2)), fig)
    elif name == "bit_widths":
        p.bit_widths(qx.bit_widths(g), fig.subplots())
    elif name == "chunk_sweep":
        p.chunk_sweep({"真实梯度": qx.chunk_sweep(g, bits=4, chunks=(None, 256))}, fig.subplots())   # the chapter's name
    elif name == "bias":
        p.bias(qx.rounding_bias(g[:1024], bits=2, draws=4), fig.subplots())
    elif name == "tiny_updates":
        p.tiny_updates(qx.tiny_updates(steps=20), fig.subplots())
    elif name == "variance":
        p.variance(qx.qsgd_variance(g[:1024], levels=(1, 4), chunk=512, draws=4), fig.subplots())
    elif name == "training":
        p.training(list(_digits_runs()), fig)
    elif name == "stacked":
        p.stacked(qx.stacked(g, ratio=0.01), fig.subplots())
    elif name == "snap":
        p.snap(qx.snap(g, bits=4, chunk=1024), fig)
    return fig


def _engineering(name):
    from milktea import cost
    from milktea.experiments import accumulation, breakeven, indexcost
    from milktea.experiments import overlap as ov
    from milktea.plots import engineering as p
    fig = _fig()
    profile = ov.Profile.uniform(8, 100_000, 0.05)
    link = cost.Link.gbit(1)
    if name == "gantt":
        p.gantt(fig.subplots(), ov.predict_timeline(profile, 1, link, 4, 0.01), i18n._("one bucket"))
    elif name == "gantt_grid":
        tl = {"one bucket": ov.predict_timeline(profile, 1000, link, 4, 0.01),
              "4 MB buckets": ov.predict_timeline(profile, 4, link, 4, 0.01)}
        p.gantt_grid(tl, tl, fig, title=i18n._("real compute"))
    elif name == "bucket_sweep":
        p.bucket_sweep(ov.bucket_sweep(profile, link, 4, sizes_mb=(0.5, 2, 8)), fig.subplots())
    elif name == "index_costs":
        p.index_costs(indexcost.index_costs(_grad(), ratios=(0.01, 0.1)), fig=fig)
    elif name == "accumulation":
        runs = [accumulation.Accumulated(a, h, 4 // a, 0.1 / a, 0.8) for a, h in zip((1, 2), _digits_runs())]
        p.accumulation(runs, accumulation.accumulation_time(0.05, 0.2, (1, 2, 4)), fig=fig)
    elif name == "speedup":
        labels = [r["label"] for r in _scheme_results()]   # reprice's keys: compare()'s labels
        curves = {"gbit": [0.1, 1.0, 10.0, 100.0], **{k: [4.0 / (1 + i), 2.0, 1.0, 0.5] for i, k in enumerate(labels)}}
        from milktea.distributed.reprice import crossings
        p.speedup(curves, {k: crossings(curves["gbit"], v) for k, v in curves.items() if k != "gbit"}, fig.subplots())
    elif name == "ab_step_times":
        p.ab_step_times(_comparison(i18n.language()), fig.subplots())
    elif name == "ab_accuracy":
        p.ab_accuracy(_comparison(i18n.language()), fig.subplots())
    elif name == "loss_to_target":
        from milktea.experiments.time_to_target import time_to_target
        comp = _comparison(i18n.language())
        p.loss_to_target(comp, time_to_target(comp), fig.subplots())
    elif name == "protocols_by_workers":
        p.protocols_by_workers(breakeven.protocols_by_workers(124e6, 80.0, link, workers=(2, 8, 32))[0], fig.subplots())
    return fig


def _lowrank(name):
    from milktea.experiments import lowrank as lr
    from milktea.plots import lowrank as p
    fig = _fig()
    m = torch.randn(32, 16, generator=G)
    if name == "spectrum":
        p.spectrum(lr.spectrum(m), fig.subplots())
    elif name == "rank_sweep":
        p.rank_sweep(lr.rank_sweep(m, ranks=(1, 4), calls=2), fig.subplots())
    elif name == "warm_start":
        p.warm_start(lr.warm_start_trace([m, m + 0.1, m - 0.1], rank=2), fig.subplots())
    return fig


def _dashboard(name):
    from milktea.experiments import dashboard as dx
    from milktea.plots import dashboard as p
    fig = _fig()
    if name == "pipeline":
        p.pipeline([{"stage": s, "seconds": 0.001 * (i + 1), "bytes": 1e6} for i, s in enumerate(dx.STAGES)],
                   fig.subplots(), title=i18n._("dense all-reduce"))
    elif name == "live":
        rec = dx.Recorder(batch=8, workers=2)
        for r in _scheme_results():
            for t, x in enumerate(r["records"]):
                rec.add(dict(x, step=t, label=r["label"], wire_bytes=x["payload_bytes"]))
        series, _status = rec.snapshot()
        p.live(series, fig=fig)   # as the dashboard draws it (its status line is HTML, above the figure)
    elif name == "evaluation":
        p.evaluation(dx.evaluation(_comparison(i18n.language())), fig.subplots())
    elif name == "repriced":
        p.repriced(dx.repriced(_comparison(i18n.language()), 10.0), 10.0, fig.subplots())
    return fig


def _local(name):
    from milktea.experiments import local as lx
    from milktea.plots import local as p
    from milktea.simulate import History
    fig = _fig()
    hs = {}
    for i, label in enumerate(("ddp", "ddp topk-1%+ef", "diloco H=50", "diloco H=50 int8",
                               "diloco H=20 P=4 tau=2 int8+ef")):
        hs[label] = History("gpt", label, 2, loss=[3.0] * 4, eval_steps=[0, 2, 4],
                            evals={"loss": [3.0, 2.5, 2.0 + 0.1 * i]}, dense_bytes=1000,
                            bytes_sent=[[1000 // (1 + i)] * 2 for _ in range(4)])
    if name == "loss_curves":
        p.loss_curves(hs, fig)
    elif name == "utilisation":
        p.utilisation(lx.utilisation_curves(1e9, 8, 0.5, (1, 10, 100)), fig.subplots(), 1.0, i18n._("this machine"))
    elif name == "bytes_per_step":
        p.bytes_per_step(hs, fig.subplots(), steps=4)
    return fig


def _training(name):
    from milktea.plots import training as p
    ax = _fig().subplots()
    for h in _digits_runs():
        p.curve(h, ax=ax)
    return ax.figure


def _report(name):
    fig = _fig()
    if name == "Comparison.plot_time":
        _comparison(i18n.language()).plot_time(fig.subplots())
    else:
        _comparison(i18n.language()).plot_loss(fig.subplots(1, 2))
    return fig


def _ft(name):
    from milktea.local.ft.log import FTResult
    from milktea.plots import ft as p
    log = [{"step": s, "quorum": s, "members": [0, 1] if 3 <= s < 6 else [0, 1, 2],
            "recovering": [2] if s == 6 else [], "heard": [0, 1], "committed": s != 4, "time": 2.0 * s}
           for s in range(9)]
    loss = {g: [(0.2 * i, i, 3.0 - 0.01 * i) for i in range(60)] for g in (0, 1)}
    loss[2] = [(0.2 * i, i, 3.0 - 0.01 * i) for i in range(30)] + [(12 + 0.2 * i, i, 2.8) for i in range(20)]
    kills = [{"killed": 6.5, "restarted": 9.0, "rejoined": 12.0}]
    fig = _fig()
    p.quorum_timeline(FTResult("topk", "", 20.0, quorum_log=log, kills=kills, loss=loss), fig)
    return fig


DRAW = {"bottleneck": _bottleneck, "compression": _compression, "topk": _topk, "ledger": _ledger,
        "quantization": _quantization, "engineering": _engineering, "lowrank": _lowrank, "dashboard": _dashboard,
        "local": _local, "training": _training, "ft": _ft}
NOT_PLOTS = {"training.metric_name"}   # public functions of milktea.plots that draw nothing


def plotting_functions() -> list[str]:
    """module.function for every public function defined in milktea.plots' modules, and compare()'s plots."""
    import milktea.plots
    found = []
    for info in pkgutil.iter_modules(milktea.plots.__path__):
        module = importlib.import_module(f"milktea.plots.{info.name}")
        found += [f"{info.name}.{n}" for n, f in inspect.getmembers(module, inspect.isfunction)
                  if not n.startswith("_") and f.__module__ == module.__name__]
    return sorted(set(found) - NOT_PLOTS) + ["report.Comparison.plot_time", "report.Comparison.plot_loss"]


def draw(qualified: str):
    module, name = qualified.split(".", 1)
    return _report(name) if module == "report" else DRAW[module](name)


def figure_texts(fig) -> list[str]:
    from matplotlib.text import Text
    fig.canvas.draw()   # tick labels exist once drawn
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_plotting_function_is_drawn_here():
    known = set(DRAW) | {"report"}
    missing = [f for f in plotting_functions() if f.split(".")[0] not in known]
    assert not missing, f"draw these in Chinese in this test (add them to DRAW): {missing}"


@pytest.mark.parametrize("qualified", plotting_functions())
def test_figure_shows_no_english_in_chinese(qualified):
    with i18n.speaking("zh"):
        fig = draw(qualified)
        texts = figure_texts(fig)
    assert texts, f"{qualified} drew no text: the test reads nothing"
    found = [str(f) for t in texts for f in zh_scan.check_text(t, qualified, "figure")]
    assert not found, "\n".join(found)


def test_the_scan_sees_a_figure_in_english():
    """The check above means something: the same figure in English is full of English words."""
    texts = figure_texts(draw("quantization.training"))
    assert any(f.kind == "English" for t in texts for f in zh_scan.check_text(t, "x", "figure"))


# ---------------------------------------------------------------- every scheme's name

def scheme_names() -> list[str]:
    """Every name code gives a run: compare()'s labels, the simulator's ids, milktea.local's labels, named runs."""
    from milktea import QSGD, Cast, Chain, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
    from milktea.distributed import schemes
    from milktea.local import DataParallel, DiLoCo
    names = [schemes.label(n) for n in schemes.SCHEMES]   # compare() shows labels; its ids are keys
    codecs = [None, TopK(0.01), TopK(0.01, approximate=True), RandomK(0.001), Quantize(8), Quantize(4, stochastic=True),
              Sign(), QSGD(4), TernGrad(), Cast(torch.float16), PowerSGD(4), PowerSGD(4, batched=True),
              Chain(TopK(0.01), Quantize(8))]
    for c in codecs:
        names += ["dense"] if c is None else [c.name, c.name + "+ef", c.name + "+ef2/car"]
        try:
            names += [DataParallel(compressor=c).label, DiLoCo(inner_steps=50, compressor=c).label,
                      DiLoCo(inner_steps=20, fragments=4, overlap=2, compressor=c).label]
        except ValueError:   # a compressor that cannot carry a pseudo-gradient (PowerSGD)
            pass
    from milktea.experiments import dgc
    from milktea.onebit import OneBitAdam
    names += [OneBitAdam(warmup=20).name, OneBitAdam(warmup=None).name, *dgc.VARIANTS]
    from milktea.advice import advise, memory_bound_codecs   # the decision guide's menu
    names += [r["scheme"] for r in advise(1e9, 16, 10.0, 0.5, codec_ns=memory_bound_codecs(2000.0)).rows]
    return sorted(set(names))


def test_scheme_names_read_as_chinese_names():
    bad = []
    with i18n.speaking("zh"):
        from milktea.tables import word
        for name in scheme_names():
            shown = word(name)
            english = zh_scan.english_words(shown)
            outside = re.sub(r"（[^（）]*）", "", shown)   # a qualifier in brackets may hold a comma
            if english or "，" in outside or ", " in outside or re.search(r"（[^）]*（", shown):
                bad.append(f"{name!r} shows as {shown!r}")
    assert not bad, "scheme names in Chinese (milktea/names.py, the catalog):\n" + "\n".join(bad)


def test_english_keeps_the_ids():
    from milktea.tables import word
    assert [word(n) for n in ("sign+ef", "ddp topk-1%+ef", "dense")] == ["sign+ef", "ddp topk-1%+ef", "dense"]
