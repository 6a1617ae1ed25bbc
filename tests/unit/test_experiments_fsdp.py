"""Chapter 09's numbers and words (milktea.experiments.fsdp, milktea.widgets.sharding): the
tables against milktea.fsdp.cost and hand-computed references, and every verdict fed numbers
that turn it, in both languages."""
import pytest

from milktea import i18n
from milktea.cost import Link, allgather_time
from milktea.experiments import fsdp as fx
from milktea.fsdp.job import FSDPRun
from milktea.fsdp.stats import StepTraffic, Traffic
from milktea.fsdp.train import RunConfig


@pytest.fixture(params=["en", "zh"])
def lang(request):
    with i18n.speaking(request.param):
        yield request.param


def test_holdings_are_the_zero_papers_stages():
    rows = fx.holdings(7.5e9, 64, param_bytes=2, grad_bytes=2, optimizer_bytes=12)
    assert [round(r["total GB"], 1) for r in rows] == [120.0, 31.4, 16.6, 1.9]       # ZeRO paper, Figure 1
    for r in rows:
        assert r["total GB"] == pytest.approx(r["params GB"] + r["grads GB"] + r["optimizer GB"] + r["ledger GB"])
    assert "64x" in fx.holdings_sentence(rows, 64)


def test_traffic_counts_an_all_reduce_as_its_two_halves():
    rows = fx.traffic(1e9, 8)
    assert [r["x DDP"] for r in rows] == pytest.approx([1, 1, 1, 1.5])
    assert rows[0]["all-reduce GB"] == pytest.approx(2 * 7 / 8 * 4)
    mixed = fx.traffic(1e9, 8, grad_bytes=2, weight_bytes=4)          # bf16 gradients, fp32 weights
    assert mixed[1]["x DDP"] == pytest.approx((2 + 4) / (2 * 2)) and mixed[3]["x DDP"] == pytest.approx(10 / 4)


def test_step_time_overlaps_or_adds_the_collectives():
    link = Link.gbit(10, 1e-5)
    comm = allgather_time(4e8 / 8, 8, link) * 3                      # reduce-scatter + two all-gathers, fp32
    assert fx.step_s(1e8, 8, link, 0.01, grad_bytes=4, weight_bytes=4) == pytest.approx(max(0.01, comm))
    assert fx.step_s(1e8, 8, link, 0.01, grad_bytes=4, weight_bytes=4, overlap=False) == pytest.approx(0.01 + comm)


def test_compression_pays_on_a_slow_link_and_not_where_the_link_is_hidden(lang):
    slow, fast = fx.paying_rows(7e9, 64, compute_s=4.0, gbits=(1, 1e5))
    assert slow["int8 against fp32"].kind == "faster" and slow["int8: time computing (%)"] < 5
    assert fast["int8 against fp32"].kind == "same" and fast["int8: time computing (%)"] == pytest.approx(100)


def test_the_ledger_before_the_reduce_scatter_is_n_minus_1_shards():
    fsdp_int8, worker, hsdp = fx.ledger_at_scale(8e9, nodes=8, per_node=8)
    assert fsdp_int8["ledger GB"] == 0
    assert worker["ledger GB"] == pytest.approx(63 * worker["grads GB"])
    assert hsdp["ledger GB"] == pytest.approx(hsdp["grads GB"]) == pytest.approx(8e9 / 8 * 4 / 1e9)
    text = fx.scale_sentence([fsdp_int8, worker, hsdp], ranks=64, per_node=8)
    assert "63x" in text and f"{worker['ledger GB'] / hsdp['ledger GB']:.3g}x less" in text


@pytest.mark.parametrize("ledger, kind", [(300.0, "more"), (100.0, "same"), (105.0, "same"), (40.0, "less"),
                                          (float("nan"), "nan")])
def test_the_ledger_verdict_turns_with_the_numbers(ledger, kind, lang):
    said = fx.ledger_verdict(ledger, 100.0)
    assert said.kind == kind
    if kind == "more":
        assert ("more memory" if lang == "en" else "还多") in said


@pytest.mark.parametrize("sharded, ddp, busted", [(1000.0, 1000.0, True), (1010.0, 1000.0, True),
                                                  (1500.0, 1000.0, False), (900.0, 1000.0, True)])
def test_myth_sharding_sends_more_both_ways(sharded, ddp, busted, lang):
    v = fx.more_than_ddp(sharded, ddp)
    assert v.busted is busted and v.numbers["ratio"] == sharded / ddp
    if not busted:
        assert ("1.50x more" if lang == "en" else "1.50 倍") in v.text
    assert v._repr_markdown_().startswith("**")


@pytest.mark.parametrize("grads, step, busted", [(3.9, 1.3, True), (3.9, 3.9, False), (3.9, 3.8, False),
                                                 (2.0, 1.5, True)])
def test_myth_compressing_the_gradients_compresses_the_step_both_ways(grads, step, busted, lang):
    v = fx.grads_only(grads, step)
    assert v.busted is busted
    assert f"{step:.2f}" in v.text and f"{grads:.2f}" in v.text
    if busted:
        assert ("all-gathers" if lang == "en" else "全收集") in v.text


def _run(rs_bytes, ag_bytes, losses, memory, **cfg):
    step = StepTraffic(0, {"all_gather_forward": Traffic(1, ag_bytes, 400), "reduce_scatter": Traffic(1, rs_bytes, 400)})
    return FSDPRun(RunConfig(**cfg), 4, 100, losses, [0.1] * len(losses), [step, step], memory, None, "state")


def test_run_tables_and_the_bf16_sentence(lang):
    mem = {"params": 10, "grads": 10, "optimizer": 20, "ledger": 0, "total": 40}
    runs = {"fp32": _run(400, 400, [3.0, 2.0], [mem] * 4), "bf16": _run(200, 400, [3.0, 2.1], [mem] * 4)}
    rows = fx.traffic_rows(runs, "fp32")
    assert [r["x fewer than fp32"] for r in rows] == [1.0, pytest.approx(800 / 600)]
    assert rows[1]["reduce-scatter kB"] == 0.2 and rows[1]["all-reduce kB"] == 0 and rows[1]["loss"] == 2.1
    text = fx.reduce_sentence(runs["fp32"], runs["bf16"])
    assert "2.00" in text and "1.33" in text and "2.1000" in text
    big = dict(mem, ledger=30, total=70)
    [m] = fx.memory_rows({"topk": _run(10, 400, [3.0], [mem, big, mem, mem])})
    assert m["ledger / grads"] == 3.0 and m["total kB"] == 0.07        # the largest rank
    worker = {"ledger kB": 30.0, "grads kB": 10.0}
    shard = {"ledger kB": 10.0, "grads kB": 10.0}
    assert "3.00" in fx.ledger_sentence(worker, shard, workers=4)
    hop = StepTraffic(0, {"reduce_scatter": Traffic(1, 400, 400), "all_reduce": Traffic(1, 10, 300)})
    hsdp = FSDPRun(RunConfig(replicas=2), 4, 100, [3.0], [0.1], [hop, hop], [mem] * 4, "shard", "state")
    assert ("(30x fewer)" if lang == "en" else "少到 1/30") in fx.hop_sentence(hsdp)
    assert "0.3 kB" in fx.hop_sentence(hsdp) and "0.4 kB" in fx.hop_sentence(hsdp)


@pytest.fixture(params=["en", "zh"])
def drawn_in(request):
    """The language with its fonts (Chinese glyphs for the figure), as a chapter's first cell
    sets them; the process's own language is given back (not a speaking() block's)."""
    before = i18n.language()
    i18n.use(request.param)
    yield request.param
    i18n.use(before)


def test_the_view_prices_what_its_controls_say(drawn_in):
    from milktea.widgets.sharding import sharding_view
    v = sharding_view(params=1e9, shards=8, stage=3)
    before = v.readout.value
    assert v.image.value[:4] == b"\x89PNG"
    v.controls["ledger"].value = "worker"
    assert v.readout.value != before
    assert "3.5 GB" in v.readout.value                                 # 7/8 of 1e9 fp32 entries
    v.controls["stage"].value = 0
    v.controls["ledger"].value = "none"
    assert "16 GB" in v.readout.value
    v.controls["grads"].value = "Top-1%"                               # DDP gathers Top-1% packets: (N-1) of them
    from milktea.widgets.sharding import grad_wire
    c = grad_wire()["Top-1%"]
    assert 0.02 < c < 0.2 and f"{7 * c * 1e9 / 1e6:.3g} MB" in v.readout.value
    v.controls["stage"].value = 3                                      # a reduce-scatter: (N-1)/N of the packets
    assert f"{(7 / 8 * c + 2 * 7 / 8 * 4) * 1e9 / 1e9:.3g} GB" in v.readout.value
