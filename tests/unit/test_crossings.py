"""Where a curve crosses a level, in both directions, and where a scheme pays, in words:
`milktea.crossings` against a brute-force scan, `breakeven.where_it_pays` fed curves of
every shape (falling, rising, U-shaped, flat within the noise) in both languages, and the
A/B test's break-even table, whose fp32-against-bf16 row once said "never pays" for a
curve that starts below 1 and rises."""
import math

import pytest

from milktea import i18n
from milktea.crossings import crossings, segments
from milktea.experiments import breakeven

GRID = [0.1 * 1.25 ** i for i in range(37)]


@pytest.fixture(params=["en", "zh"])
def lang(request):
    with i18n.speaking(request.param):
        yield request.param


def _curve(f):
    return [f(b) for b in GRID]


def _brute(xs, ys, level=1.0):
    """Sign changes of y - level between neighbours, on a fine log grid between each pair."""
    out = []
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if (y0 - level) * (y1 - level) < 0:
            out.append(("up" if y1 > y0 else "down", x0, x1))
    return out


@pytest.mark.parametrize("f", [lambda b: 3 / (1 + b / 5), lambda b: 0.5 + b / 40, lambda b: 2 - 1.5 * math.sin(b / 30),
                               lambda b: 1 + 0.3 * math.cos(b)], ids=["falls", "rises", "dips", "wiggles"])
def test_crossings_match_a_brute_force_scan(f):
    ys = _curve(f)
    found = crossings(GRID, ys)
    brute = _brute(GRID, ys)
    assert [c.direction for c in found] == [d for d, _a, _b in brute]
    for c, (_d, a, b) in zip(found, brute):
        assert a <= c.at <= b


def test_a_curve_that_starts_below_one_and_rises_starts_paying(lang):
    """The review's case: fp32 against bf16, below 1 on slow links (bf16 halves the bytes),
    above it on fast ones (bf16's cast costs more than it saves). Said as starting to pay,
    never as "never pays"."""
    ys = _curve(lambda b: 0.55 + b / 25)
    said = breakeven.where_it_pays(GRID, ys)
    assert said.kind == "starts"
    assert ("starts paying above", "以上开始划算")[lang == "zh"] in said
    assert ("never", "都不划算")[lang == "zh"] not in said


def test_each_shape_in_words(lang):
    zh = lang == "zh"
    falls = breakeven.where_it_pays(GRID, _curve(lambda b: 3 / (1 + b / 5)))
    assert falls.kind == "stops" and ("stops paying above", "以上不再划算")[zh] in falls
    always = breakeven.where_it_pays(GRID, [2.0] * len(GRID))
    assert always.kind == "always" and ("pays on every link tried", "都划算")[zh] in always
    never = breakeven.where_it_pays(GRID, [0.5] * len(GRID))
    assert never.kind == "never" and ("never pays", "都不划算")[zh] in never
    flat = breakeven.where_it_pays(GRID, [1.01, 0.99] * 18 + [1.0], band=0.05)
    assert flat.kind == "level" and "5%" in flat
    dips = breakeven.where_it_pays(GRID, _curve(lambda b: 0.6 + abs(math.log10(b) - 0.5)))   # pays at both ends
    pays = dips.count("划算") - dips.count("不划算") if zh else dips.count("pays")
    assert dips.kind == "mixed" and pays == 2 and ("costs time", "不划算")[zh] in dips


def test_a_level_stretch_is_said_only_where_it_is_wide():
    """Passing through the noise band between two grid points is a crossing, not a range of
    level links; a wide band of level links is said as one."""
    thin = breakeven.where_it_pays([1, 10, 100], [2.0, 1.02, 0.5], band=0.05)
    assert thin.kind == "stops"
    wide = breakeven.where_it_pays(GRID, _curve(lambda b: 2.0 if b < 1 else 1.0 if b < 50 else 0.5), band=0.05)
    assert wide.kind == "mixed" and "within the noise" in wide


def test_segments_stay_consistent():
    for ys in (_curve(lambda b: 3 / (1 + b / 5)), _curve(lambda b: 1 + 0.3 * math.cos(b))):
        segs = segments(GRID, ys, band=0.1)
        assert segs[0].lo is None and segs[-1].hi is None
        assert all(a.hi == b.lo for a, b in zip(segs, segs[1:]))        # each starts where the last ended
        assert all(a.kind != b.kind for a, b in zip(segs, segs[1:]))


def test_bad_curves_are_refused():
    with pytest.raises(ValueError, match="increasing"):
        crossings([1, 1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="positive and finite"):
        crossings([1, 2], [1, -2])
    with pytest.raises(ValueError, match="as many"):
        segments([1, 2], [1])
    with pytest.raises(ValueError, match="band"):
        segments([1, 2], [1, 2], band=1.0)
