"""The chapters' conclusions turn with their numbers: each sentence function of the course,
fed made-up measurements on both sides of its verdict, says the side the numbers are on
(in English and in Chinese)."""
from types import SimpleNamespace

import pytest
import torch

from milktea import i18n
from milktea.experiments import abtest, compression, quantization_sentences as qsx, topk


@pytest.fixture(params=["en", "zh"])
def lang(request):
    with i18n.speaking(request.param):
        yield request.param


def _m(name, wire, err):
    return compression.Measurement(name, "sparsify", wire, 40_000, err, 0.8, 0.64)


@pytest.mark.parametrize("err2, word", [(0.6001, ("barely", "几乎没变")), (0.9, ("grows", "增大"))])
def test_stacking_says_whether_the_error_moved(err2, word, lang):
    text = compression.stacking_sentence(_m("top", 800, 0.6), _m("top+int8", 500, err2))
    assert word[lang == "zh"] in text and "1.60" in text


def _timing(times):
    t = topk.SelectionTiming([1000], 0.01, "cpu", 1)
    for name, v in times.items():
        t.times[name], t.noise[name], t.counts[name] = [v], [0.02], [10]
    return t


def test_selection_names_the_fastest_whichever_it_is(lang):
    slow_sort = _timing({"full sort": 5.0, "partition": 1.0, "torch.topk": 2.0, "sampled threshold": 3.0})
    text = topk.selection_verdict(slow_sort)
    from milktea.tables import word   # the selectors' names as the reader's language writes them
    assert text.index(word("partition")) < text.index("torch.topk")
    assert ("slower" in text) if lang == "en" else ("慢" in text)
    fast_sort = _timing({"full sort": 0.5, "partition": 1.0, "torch.topk": 2.0, "sampled threshold": 3.0})
    text = topk.selection_verdict(fast_sort)
    assert text.index(word("full sort")) < text.index(word("partition"))     # sort won here: it is named first
    tie = _timing({"full sort": 5.0, "partition": 1.0, "torch.topk": 1.01, "sampled threshold": 3.0})
    assert ("tie" in topk.selection_verdict(tie)) if lang == "en" else ("打平" in topk.selection_verdict(tie))


def test_selection_says_where_the_sampler_fell_back(lang):
    """Sizes too small to sample are named (they time the exact path); a race at sizes that all
    sample says nothing of it."""
    def race(sizes):
        t = topk.SelectionTiming(list(sizes), 0.01, "cpu", 1)
        for name in ("full sort", "partition", "torch.topk", "sampled threshold"):
            t.times[name], t.noise[name], t.counts[name] = [1.0] * len(sizes), [0.02] * len(sizes), [10] * len(sizes)
        return t
    assert topk.sampled_at(race([10_000, 100_000, 1_000_000])) == [False, False, True]
    small, big = topk.selection_verdict(race([10_000, 100_000, 1_000_000])), topk.selection_verdict(race([2_000_000]))
    assert "10,000" in small and "100,000" in small
    said = "exact selection" if lang == "en" else "精确选择"
    assert said in small and said not in big


@pytest.mark.parametrize("lo, hi, words", [
    (8.0, 565.0, ("below", "beyond", "off by more")), (20.0, 80.0, ("inside", "inside", "right order")),
    (2.0, 50.0, ("below", "inside", "off by more")),
])
def test_claim_follows_the_ratios(lo, hi, words):
    rows = [{"density": 0.1, "R": lo}, {"density": 0.001, "R": hi}]
    text = topk.claim_sentence(rows)
    at10, at01 = text.split("when")[1], text.split("when")[2]
    assert words[0] in at10 and words[1] in at01 and words[2] in text


@pytest.mark.parametrize("lo, hi, end", [(2.0, 50.0, 0.1), (20.0, 900.0, 0.001), (2.0, 900.0, None),
                                         (8.0, 250.0, "")])
def test_claim_says_which_end_is_off(lo, hi, end, lang):
    """Off by more than 3x at the 10% end, the 0.1% end, both, or neither: the sentence names which."""
    text = topk.claim_sentence([{"density": 0.1, "R": lo}, {"density": 0.001, "R": hi}])
    verdict = text.split("。" if lang == "zh" else ". ")[-3 if lang == "zh" else -3]
    if end == "":
        assert ("right order" in text) if lang == "en" else ("数量级" in text)
    elif end is None:
        assert ("both ends" in text) if lang == "en" else ("两端" in text)
    else:
        shown = f"{end:.0%}" if end == 0.1 else f"{end:.1%}"
        assert ("both ends" not in text and f"where {shown} are kept" in text) if lang == "en" else \
            ("两端" not in text and f"保留 {shown} 时" in text), verdict


def test_randomk_noise_is_judged_against_the_exact_standard_error():
    g = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    assert "sampling noise" in topk.randomk_sentence(g, 0.01)           # Gaussian: draws near 1%
    skew = torch.zeros(10_000)
    skew[:5] = 1000.0                                                  # five entries hold everything
    skew[5:] = 1e-3
    text = topk.randomk_sentence(skew, 0.01, trials=20)
    assert ("sampling noise" in text) or ("larger than two standard errors" in text)


def _rows(zt, z1024, zt0, z10240):
    loud = [{"chunk": "tensor", "zeroed": zt, "relative error": 1.0, "bits/entry": 4.0},
            {"chunk": 1024, "zeroed": z1024, "relative error": 0.3, "bits/entry": 4.03}]
    plain = [{"chunk": "tensor", "zeroed": zt0, "relative error": 0.5, "bits/entry": 4.0},
             {"chunk": 1024, "zeroed": z10240, "relative error": 0.2, "bits/entry": 4.03},
             {"chunk": 64, "zeroed": 0.1, "relative error": 0.1, "bits/entry": 4.5}]
    return plain, loud


def test_outlier_sentence_credits_the_outlier_only_with_its_own_part():
    plain, loud = _rows(1.0, 0.46, 0.83, 0.43)
    assert "ordinary rounding" in qsx.outlier_sentence(plain, loud) and "+3 points" in qsx.outlier_sentence(plain, loud)
    plain, loud = _rows(1.0, 0.60, 0.30, 0.05)
    assert "outlier's doing" in qsx.outlier_sentence(plain, loud)


def _h(scheme, acc, ratio=10.0):
    return SimpleNamespace(scheme=scheme, ratio=ratio, config={"steps": 100}, final=lambda k, a=acc: a)


def test_training_sentence_says_ahead_and_behind(lang):
    hs = [_h("dense", 0.90), _h("sign", 0.80), _h("sign+ef", 0.95), _h("int4", 0.905)]
    text = qsx.training_sentence(hs)
    if lang == "en":
        assert "10.0 points behind dense" in text and "5.0 points ahead of dense" in text
        assert "int4: 90.5%, level with dense" in text and "helped (+15.0 points" in text
    else:
        assert "落后稠密方案 10.0 个百分点" in text and "领先稠密方案 5.0 个百分点" in text and "有帮助" in text
        assert "。 " not in text                       # no space after a full-width stop
    hs[2] = _h("sign+ef", 0.70)
    assert ("hurt" in qsx.training_sentence(hs)) if lang == "en" else ("有害" in qsx.training_sentence(hs))


def test_onebit_verdict_counts_the_warm_up_and_reports_divergence():
    rows = [{"warmup": None, "accuracy": 0.95, "bytes_per_step": 9640.0},
            {"warmup": 12, "accuracy": 0.90, "bytes_per_step": 368.0, "R": 26.2, "R whole run": 4.34},
            {"warmup": 1, "accuracy": 0.1, "bytes_per_step": 368.0, "diverged_at": 27}]
    text = qsx.onebit_verdict(rows, 60)
    assert "4.3x" in text and "20%" in text and "5.0 points behind" in text and "step 27" in text
    rows[2]["diverged_at"] = None
    assert "still trained" in qsx.onebit_verdict(rows, 60)


def _comparison(steps_ms):
    rows = [{"scheme": s, "label": s, "step_ms": t, "accuracy": 0.9, "comm_ms": 1.0, "speedup": steps_ms[0][1] / t}
            for s, t in steps_ms]
    return SimpleNamespace(rows=rows, where="here", workers=2, config={"steps": 30}, results=[], skip=0)


def test_ab_verdict_never_calls_a_slower_scheme_faster(lang):
    ab = _comparison([("dense", 100.0), ("torch-bf16", 80.0), ("int8", 60.0)])
    text = abtest.ab_verdict(ab)
    assert ("int8 was 1.67x faster than dense" in text) if lang == "en" else ("int8 比稠密方案快" in text)
    ab = _comparison([("dense", 100.0), ("torch-bf16", 120.0), ("int8", 150.0)])
    text = abtest.ab_verdict(ab)
    assert ("No scheme's step was shorter" in text and "torch-bf16 took 1.20x as long as dense" in text) \
        if lang == "en" else ("没有哪种方案" in text)
    ab = _comparison([("dense", 100.0), ("torch-bf16", 70.0), ("int8", 90.0)])
    assert ("No other scheme's step was shorter than bf16's" in abtest.ab_verdict(ab)) if lang == "en" else True
