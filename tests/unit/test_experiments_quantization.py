"""The quantization chapter's measurements, checked against references."""
import math

import numpy as np
import pytest
import torch

from milktea import QSGD, Quantize
from milktea.experiments import quantization as qx
from milktea.experiments.tables import fmt, markdown_table


@pytest.fixture(scope="module")
def g():
    torch.manual_seed(0)
    return torch.randn(5000) * torch.rand(5000) ** 4    # heavy-tailed, like a gradient


def test_steps_match_the_absmax_formula(g):
    q = Quantize(4, chunk=1000)
    steps = qx.steps_of(q.compress(g))
    ref = (g.view(5, 1000).abs().amax(1) / 7).repeat_interleave(1000)
    torch.testing.assert_close(steps, ref)
    with pytest.raises(ValueError, match="Quantize packet"):
        qx.steps_of(QSGD().compress(g))


def test_half_step_bound_holds_and_is_tight(g):
    for r in qx.half_step_check(g, bits=(8, 4, 2), chunk=512):
        assert r.holds, r.worst
        assert r.worst > 0.9        # some entry really comes close to half a step
        assert r.errors.shape == g.shape
        assert r.nbytes == Quantize(r.bits, 512).compress(g).nbytes


def test_tolerance_is_float32_sized():
    r = qx.HalfStep(8, 0, 1.0, 0.0, 1.0, 0.0, torch.zeros(1))
    assert 1e-5 < r.tolerance < 1e-4
    assert not qx.HalfStep(8, 0, 1.0, 0.0, 1.001, 0.0, torch.zeros(1)).holds


def test_bit_widths_shrink_bytes_and_grow_error(g):
    rows = qx.bit_widths(g)
    assert [r.name for r in rows] == ["fp16", "int8", "int4", "int2", "sign"]
    nbytes = [r.nbytes for r in rows]
    assert nbytes == sorted(nbytes, reverse=True)
    assert rows[1].rel_error < rows[2].rel_error < rows[3].rel_error
    for r in rows:
        assert r.bits_per_entry == pytest.approx(8 * r.nbytes / g.numel())


def test_outlier_zeroes_everything_with_one_scale(g):
    rows = qx.chunk_sweep(qx.with_outlier(g, 1e4), bits=4, chunks=(None, 100), skip=0)
    assert rows[0]["zeroed"] == 1.0 and rows[0]["relative error"] == pytest.approx(1.0)
    assert rows[1]["zeroed"] < 0.9
    assert rows[1]["bits/entry"] > rows[0]["bits/entry"]


def test_stochastic_average_converges_nearest_does_not(g):
    b = qx.rounding_bias(g, bits=2, draws=64)
    assert b.draws == [1, 2, 4, 8, 16, 32, 64]
    assert b.stochastic[-1] < b.stochastic[0] / 4     # ~1/sqrt(64) = 1/8
    assert len(set(b.nearest)) == 1
    assert b.per_draw_error["stochastic"] > b.per_draw_error["nearest"]


def test_tiny_push_is_lost_by_nearest_rounding():
    s = qx.tiny_updates(steps=400, small=0.002, big=1.0, bits=8, seeds=20)
    assert s["nearest"][-1] == 0.0
    assert s["runs"].shape == (20, 400) and len(set(s["runs"][:, -1])) > 5     # every run its own draws
    assert s["stochastic"][-1] == pytest.approx(0.8, rel=0.1)                  # the mean of 20 runs
    assert s["step"] == pytest.approx(1 / 127)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tiny_push_sentence_follows_the_runs(lang):
    """Made-up runs: centred on the truth they read as unbiased, shifted they do not."""
    from milktea.experiments.quantization_sentences import tiny_updates_sentence
    from milktea.i18n import speaking
    true = [0.002 * t for t in range(1, 101)]
    base = {"true": true, "nearest": [0.0] * 100, "step": 1 / 127}
    spread = np.linspace(-0.05, 0.05, 30)
    fair = dict(base, runs=np.array([[v + d for v in true] for d in spread]))
    off = dict(base, runs=np.array([[v + d + 0.05 for v in true] for d in spread]))
    with speaking(lang):
        a, b = tiny_updates_sentence(fair), tiny_updates_sentence(off)
    words = {"en": ("right on average", "do not look unbiased"), "zh": ("平均而言是准的", "看起来并非无偏")}[lang]
    assert words[0] in a and words[1] not in a
    assert words[1] in b and words[0] not in b
    assert "0.150" in a and "0.250" in a and "0.000" in a     # the range of single runs, nearest's total


def test_qsgd_variance_under_bound_and_unbiased(g):
    for v in qx.qsgd_variance(g, levels=(1, 4, 16), chunk=256, draws=40):
        assert v.measured <= v.bound
        assert v.bias < 3 * math.sqrt(v.measured / 40)    # only sampling noise remains


def test_stacked_parts_add_up_to_the_packet(g):
    rows = qx.stacked(g, ratio=0.02)
    for r in rows:
        assert r["header"] + r["indices"] + r["values"] == r["bytes"]
        assert r["header"] > 0
    assert len({r["indices"] for r in rows}) == 1          # same selection, same indices
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)


def test_snap_grid_and_errors(g):
    s = qx.snap(g, bits=4, chunk=None)
    assert len(s.grid) == 15 and s.half_step == pytest.approx(float(g.abs().max()) / 7 / 2)
    assert float(s.error.abs().max()) <= s.half_step * (1 + 1e-5)
    one = qx.snap(g, bits=1)
    assert one.name == "sign" and len(one.grid) == 2 and one.half_step == 0
    with pytest.raises(ValueError, match="bits must be one of"):
        qx.snap(g, bits=3)


def test_digits_gradient_is_real_and_reproducible():
    a = qx.digits_gradient(hidden=16, warmup_steps=2)
    b = qx.digits_gradient(hidden=16, warmup_steps=2)
    assert a.shape == (64 * 16 + 16 + 16 * 10 + 10,)
    torch.testing.assert_close(a, b)
    assert float(a.norm()) > 0


def test_tables():
    assert fmt(1234567) == "1,234,567"
    assert fmt(0.123456) == "0.123"
    assert fmt(float("nan")) == "–"
    md = markdown_table([{"a": 1, "b": 2.5}], columns=["b", "a"])
    assert md.splitlines()[0] == "| b | a |" and md.splitlines()[2] == "| 2.5 | 1 |"
    with pytest.raises(ValueError):
        markdown_table([])


def test_docstrings():
    import doctest
    from milktea.experiments import quantization, tables
    assert doctest.testmod(quantization).failed == 0
    assert doctest.testmod(tables).failed == 0


def test_snap_measures_every_entry_against_its_own_chunk():
    # two chunks with very different scales: in units of the first chunk's half step, the
    # loud chunk's errors would lie far outside +-1; in its own units, every entry is inside
    x = torch.cat([torch.linspace(-1e-3, 1e-3, 1024), torch.linspace(-5.0, 5.0, 1024)])
    s = qx.snap(x, bits=4, chunk=1024)
    assert float(s.error.abs().max()) > 100 * s.half_step
    scaled = s.error_in_half_steps
    assert float(scaled.abs().max()) <= 1 + 1e-4
    ref_step = torch.cat([torch.full((1024,), 1e-3 / 7), torch.full((1024,), 5.0 / 7)])
    torch.testing.assert_close(scaled, s.error / (ref_step / 2), rtol=1e-4, atol=1e-4)
    assert qx.snap(x, bits=1).error_in_half_steps is None
    stochastic = qx.snap(x, bits=4, chunk=1024, stochastic=True)
    assert float(stochastic.error_in_half_steps.abs().max()) <= 2 + 1e-4
