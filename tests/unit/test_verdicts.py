"""Words follow numbers: every verdict function, fed adversarial numbers (both signs, ties,
zero, NaN from a failed run, tiny and huge values), says what the numbers say, in English
and in Chinese. A sentence that kept its wording when the numbers turned would fail here."""
import math

import pytest

from milktea import i18n
from milktea.experiments import verdicts as v

NAN = float("nan")

# For each kind of verdict, words that must appear, and words that must not (the opposite
# verdict's), in each language.
WORDS = {
    "en": {"faster": (("faster",), ("slower", "as long", "same time", "no measurable")),
           "slower": (("slower",), ("faster", "same time", "no measurable")),
           "same": (("no measurable difference", "same time"), ("faster", "slower")),
           "nan": (("not measured", "failed", "not comparable"), ("faster", "slower", "ahead", "behind")),
           "ahead": (("ahead", "better"), ("behind", "worse", "level")),
           "behind": (("behind", "worse"), ("ahead", "better", "level")),
           "level": (("level",), ("ahead", "behind", "better", "worse")),
           "helped": (("helped",), ("hurt", "no measurable")),
           "hurt": (("hurt",), ("helped", "no measurable")),
           "none": (("no measurable effect",), ("helped", "hurt")),
           "inside": (("inside",), ("below", "above")),
           "below": (("below",), ("inside", "above")),
           "above": (("above",), ("inside", "below")),
           "within": (("within",), ("less than", "more than")),
           "over": (("less than measured",), ("within", "more than")),
           "under": (("more than measured",), ("within", "less than")),
           "tie": (("tie",), ("best",)),
           "fell": (("fell",), ("rose", "flat", "finite")),
           "rose": (("rose",), ("fell", "flat", "finite")),
           "flat": (("flat",), ("fell", "rose", "finite")),
           "diverged": (("diverged",), ("fell", "rose", "flat"))},
    "zh": {"faster": (("快",), ("慢", "相同", "没有可测出")),
           "slower": (("慢",), ("快", "相同", "没有可测出")),
           "same": (("没有可测出的差别", "用时相同"), ("快", "慢")),
           "nan": (("未测得", "失败"), ("快", "慢", "领先", "落后")),
           "ahead": (("领先", "好"), ("落后", "差", "持平")),
           "behind": (("落后", "差"), ("领先", "好", "持平")),
           "level": (("持平",), ("领先", "落后")),
           "helped": (("有帮助",), ("有害", "没有可测出")),
           "hurt": (("有害",), ("有帮助", "没有可测出")),
           "none": (("没有可测出的效果",), ("有帮助", "有害")),
           "inside": (("之间",), ("低于", "高于")),
           "below": (("低于",), ("之间", "高于")),
           "above": (("高于",), ("之间", "低于")),
           "within": (("以内",), ("低于实测", "高于实测")),
           "over": (("低于实测",), ("以内", "高于实测")),
           "under": (("高于实测",), ("以内", "低于实测")),
           "tie": (("打平",), ("最好",)),
           "fell": (("降",), ("升", "持平", "发散")),
           "rose": (("升",), ("降", "持平", "发散")),
           "flat": (("持平",), ("降到", "升到", "发散")),
           "diverged": (("发散",), ("降到", "升到", "持平"))},
}


@pytest.fixture(params=["en", "zh"])
def lang(request):
    with i18n.speaking(request.param):
        yield request.param


def says(text, kind, lang):
    assert isinstance(text, v.Said) and text.kind == kind, (text, getattr(text, "kind", None), kind)
    must, never = WORDS[lang][kind]
    assert any(w in text for w in must), f"{lang} {kind}: none of {must} in {text!r}"
    assert not any(w in text for w in never), f"{lang} {kind}: one of {never} in {text!r}"


@pytest.mark.parametrize("t, ref, noise, kind", [
    (1.0, 2.0, 0.0, "faster"), (2.0, 1.0, 0.0, "slower"), (1.0, 1.0, 0.0, "same"),
    (914.0, 512.0, 0.0, "slower"),                   # the review's overlap run: slower, said so
    (1.04, 1.0, 0.05, "same"), (1.0, 1.04, 0.05, "same"), (1.06, 1.0, 0.05, "slower"),
    (0.94, 1.0, 0.05, "faster"), (1e-300, 1.0, 0.0, "faster"), (1e300, 1e-300, 0.0, "slower"),
    (5e-9, 5e-9, 0.0, "same"), (NAN, 1.0, 0.0, "nan"), (1.0, NAN, 0.0, "nan"), (None, 1.0, 0.0, "nan"),
])
def test_speed_follows_the_times(t, ref, noise, kind, lang):
    says(v.speed(t, ref, noise), kind, lang)
    says(v.compare_speed("A", t, "B", ref, noise), kind, lang)
    if kind in ("faster", "slower") and 1e-6 < t < 1e6 and 1e-6 < ref < 1e6:
        r = max(t, ref) / min(t, ref)
        assert v._times(r) in v.speed(t, ref, noise)       # the ratio printed is the ratio measured


@pytest.mark.parametrize("s, kind", [(2.0, "faster"), (0.56, "slower"), (1.0, "same"), (NAN, "nan")])
def test_speedup_is_speed_of_the_inverse(s, kind, lang):
    says(v.speedup(s), kind, lang)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_speed_refuses_times_that_are_not_positive(bad):
    with pytest.raises(ValueError, match="> 0"):
        v.speed(bad, 1.0)
    with pytest.raises(ValueError, match="> 0"):
        v.speedup(bad)


@pytest.mark.parametrize("noise", [-0.1, NAN, None])
def test_noise_must_be_a_spread(noise):
    with pytest.raises(ValueError, match="noise"):
        v.speed(1.0, 2.0, noise)


@pytest.mark.parametrize("value, ref, noise, hib, kind", [
    (0.889, 0.953, 0.0, True, "behind"), (0.953, 0.889, 0.0, True, "ahead"), (0.9, 0.9, 0.0, True, "level"),
    (0.90, 0.905, 0.01, True, "level"), (0.0, 1.0, 0.0, True, "behind"), (-0.5, 0.5, 0.0, True, "behind"),
    (2.31, 2.52, 0.0, False, "ahead"), (3.77, 2.51, 0.0, False, "behind"), (NAN, 0.9, 0.0, True, "nan"),
    (0.9, None, 0.0, True, "nan"), (1e-12, 0.0, 0.0, True, "level"),
])
def test_gap_names_the_side_and_prints_the_size(value, ref, noise, hib, kind, lang):
    out = v.gap(value, ref, "dense", noise, higher_is_better=hib,
                **({} if hib else dict(unit="", scale=1, digits=2)))
    says(out, kind, lang)
    if kind in ("ahead", "behind"):
        size = abs(value - ref) * (100 if hib else 1)
        shown = f"{size:.1f}" if hib else f"{size:.2f}"
        assert shown in out and f"-{shown}" not in out       # a size, its direction said in words


@pytest.mark.parametrize("with_it, without_it, noise, hib, kind", [
    (0.95, 0.93, 0.0, True, "helped"), (0.93, 0.95, 0.0, True, "hurt"), (0.95, 0.95, 0.0, True, "none"),
    (0.95, 0.945, 0.01, True, "none"), (0.95, 0.93, 0.01, True, "helped"), (1.2, 1.5, 0.0, False, "helped"),
    (1.5, 1.2, 0.0, False, "hurt"), (NAN, 0.9, 0.0, True, "nan"), (0.9, NAN, 0.0, True, "nan"),
    (1e-300, -1e-300, 0.0, True, "none"),
])
def test_effect_follows_the_difference(with_it, without_it, noise, hib, kind, lang):
    out = v.effect(with_it, without_it, noise, higher_is_better=hib)
    says(out, kind, lang)
    if kind in ("helped", "hurt"):
        assert f"{100 * (with_it - without_it):+.1f}" in out       # the signed difference is printed


def test_effect_can_print_its_interval(lang):
    out = v.effect(0.95, 0.93, 0.01, show_noise=True)
    says(out, "helped", lang)
    assert "+2.0" in out and "±1.0" in out
    says(v.effect(0.93, 0.95, 0.01, show_noise=True), "hurt", lang)
    says(v.effect(0.95, 0.945, 0.01, show_noise=True), "none", lang)


@pytest.mark.parametrize("whole, part", [(22.0, 24.4), (13.4, 17.5), (10.0, 7.5), (-5.0, 3.0), (0.0, 2.0),
                                         (10.0, 0.0), (10.0, 10.0), (-3.0, -4.0), (1e9, 1e-9)])
def test_split_prints_both_signed_terms_and_they_add_up(whole, part, lang):
    out = v.split(whole, part, "inside", "outside")
    rest = whole - part
    for x in (whole, part, rest):
        assert f"{x:+.1f}" in out, (x, out)
    assert out.kind == ("part" if abs(part) >= abs(rest) else "rest")


def test_split_of_a_failed_run(lang):
    says(v.split(NAN, 1.0, "a", "b"), "nan", lang)
    says(v.split(1.0, None, "a", "b"), "nan", lang)


@pytest.mark.parametrize("value, kind", [(8.5, "below"), (10.0, "inside"), (55.0, "inside"), (100.0, "inside"),
                                         (376.0, "above"), (-1.0, "below"), (NAN, "nan"), (math.inf, "above")])
def test_within_follows_the_value(value, kind, lang):
    says(v.within(value, 10, 100), kind, lang)


def test_within_refuses_an_empty_range():
    with pytest.raises(ValueError, match="lo <= hi"):
        v.within(1.0, 2.0, 1.0)


@pytest.mark.parametrize("measured, predicted, kind", [(155.0, 100.0, "over"), (73.0, 100.0, "under"),
                                                       (110.0, 100.0, "within"), (90.0, 100.0, "within"),
                                                       (100.0, 100.0, "within"), (NAN, 100.0, "nan"),
                                                       (100.0, 0.0, "nan"), (1e300, 1e-300, "over")])
def test_model_error_names_its_direction(measured, predicted, kind, lang):
    says(v.model_error(measured, predicted), kind, lang)


@pytest.mark.parametrize("values, lower, noise, kind", [
    ({"sort": 30.0, "partition": 10.0, "torch.topk": 12.0}, True, 0.0, "partition"),
    ({"sort": 30.0, "partition": 10.0, "torch.topk": 12.0}, False, 0.0, "sort"),
    ({"a": 10.0, "b": 10.2}, True, 0.05, "tie"), ({"a": 10.0, "b": 10.0}, True, 0.0, "tie"),
    ({"a": NAN, "b": 3.0, "c": 4.0}, True, 0.0, "b"), ({"a": NAN, "b": None}, True, 0.0, "nan"),
    ({"a": 0.0, "b": 1.0}, True, 0.0, "a"), ({"a": -2.0, "b": 1.0}, True, 0.0, "a"),
    ({"a": 1e-300, "b": 1e300}, True, 0.0, "a"), ({"only": 5.0}, True, 0.0, "only"),
])
def test_winner_is_the_best_value(values, lower, noise, kind, lang):
    out = v.winner(values, noise, lower_is_better=lower)
    assert out.kind == kind, out
    if kind == "tie":
        says(out, "tie", lang)
    elif kind == "nan":
        assert ("nothing" in out) if lang == "en" else ("什么都没有" in out)
    else:
        assert out.startswith(kind) or f" {kind}" in out or out.endswith(kind) or kind in out
        others = [k for k in values if k != kind and not v.missing(values[k])]
        if others:   # the winner is named before every other
            assert all(out.index(kind) < out.index(o) for o in others if o in out)
    for k, x in values.items():
        if v.missing(x):
            assert k in out                         # a failed run is named, not dropped silently


@pytest.mark.parametrize("first, last, noise, kind", [
    (2.51, 3.77, 0.0, "rose"), (3.77, 2.51, 0.0, "fell"), (2.5, 2.5, 0.0, "flat"), (2.50, 2.52, 0.05, "flat"),
    (2.5, NAN, 0.0, "diverged"), (2.5, math.inf, 0.0, "diverged"), (None, 1.0, 0.0, "diverged"),
    (0.0, 0.0, 0.0, "flat"), (1e-9, 1e9, 0.0, "rose"), (-1.0, -2.0, 0.0, "fell"),
])
def test_trend_follows_the_loss(first, last, noise, kind, lang):
    says(v.trend(first, last, noise), kind, lang)


def test_paired_difference_and_its_interval():
    m, h = v.paired([0.95, 0.94, 0.96], [0.90, 0.91, 0.92])
    assert m == pytest.approx(0.04) and h == pytest.approx(4.30 * 0.01 / math.sqrt(3), rel=1e-3)
    m, h = v.paired([0.9, 0.8, 0.95], [0.85, 0.85, 0.85])     # differences of both signs: wide interval
    assert h > abs(m)
    assert v.paired([1.0], [0.5]) == (0.5, math.inf)          # one seed: nothing is significant
    assert all(math.isnan(x) for x in v.paired([NAN, 1.0], [0.5, 0.5]))
    with pytest.raises(ValueError):
        v.paired([1.0, 2.0], [1.0])


def test_noise_of_repeated_timings():
    assert v.noise_of([100, 102, 98, 101, 99]) == pytest.approx(0.01)
    assert v.noise_of([5.0]) == 0.0 and v.noise_of([], floor=0.03) == 0.03
    assert v.noise_of([100, 100, 100], floor=0.02) == 0.02
    assert v.noise_of([NAN, 100, 102, 98, 101, 99]) == pytest.approx(0.01)   # a failed sample is left out


def test_every_message_has_a_chinese_translation():
    """The verdicts never fall back to English in the Chinese edition."""
    with i18n.speaking("zh"):
        samples = [v.speed(1, 2), v.speed(2, 1), v.speed(1, 1, 0.1), v.speed(1, 1), v.failed(),
                   v.compare_speed("A", 1, "B", 2), v.compare_speed("A", 2, "B", 1), v.compare_speed("A", 1, "B", 1),
                   v.compare_speed("A", 1, "B", 1, 0.1), v.compare_speed("A", NAN, "B", 1),
                   v.gap(0.9, 0.8, "B"), v.gap(0.8, 0.9, "B"), v.gap(0.9, 0.9, "B"), v.gap(0.9, 0.9, "B", 0.01),
                   v.gap(1.0, 2.0, "B", higher_is_better=False, unit=""), v.gap(2.0, 1.0, "B", higher_is_better=False,
                                                                               unit=""), v.gap(NAN, 1, "B"),
                   v.effect(1, 0), v.effect(0, 1), v.effect(1, 0, 0.1, show_noise=True), v.effect(0, 1, 0.1, show_noise=True), v.effect(1, 1), v.effect(1, 1, 0.1), v.effect(NAN, 1),
                   v.split(1, 2, "甲", "乙"), v.within(0, 1, 2), v.within(3, 1, 2), v.within(1.5, 1, 2),
                   v.model_error(1, 1), v.model_error(2, 1), v.model_error(1, 2), v.winner({"a": 1, "b": 2}),
                   v.winner({"a": 1, "b": 1}), v.winner({"a": 1, "b": NAN}), v.winner({"a": 1, "b": 0}),
                   v.winner({}), v.trend(1, 2), v.trend(2, 1), v.trend(1, 1), v.trend(1, NAN)]
    for s in samples:
        ascii_words = [w for w in s.replace("x", " ").split() if w.isalpha() and w.isascii() and len(w) > 2]
        assert not [w for w in ascii_words if w not in ("A", "B")], f"English left in {s!r}"
