"""Chapter 08's per-step baseline: DGC's momentum correction in milktea.local's data-parallel
scheme, against a float64 reference; its settings checked; the sentences of the chapter's
exchange table and Myth 2 turning with their numbers."""
import numpy as np
import pytest

from milktea import MomentumCorrected, Sign, TopK
from milktea.experiments import local as lx
from milktea.experiments import local_demos as demos
from milktea.i18n import speaking
from milktea.local import SGD, AdamW, DataParallel, simulate
from milktea.tasks import Targets


def _topk_idx(v, k):
    return np.argsort(-np.abs(v), kind="stable")[:k]


def test_momentum_correction_follows_the_float64_reference():
    task = Targets(n_params=20, workers=3, spread=2.0, seed=1)
    lr, m, k, steps = 0.1, 0.9, 3, 15
    h = simulate(task, DataParallel(SGD(lr=lr), TopK(k=k), momentum_correction=m), workers=3, steps=steps,
                 batch=1, eval_every=1, device="cpu")
    T = task.targets.numpy()
    x, u, v = np.zeros(20), np.zeros((3, 20)), np.zeros((3, 20))
    want = [np.linalg.norm(x - T.mean(0))]
    for _ in range(steps):
        sent = np.zeros((3, 20))
        for i in range(3):
            u[i] = m * u[i] + (x - T[i])            # the velocity, on the worker
            v[i] += u[i]                            # into the ledger
            idx = _topk_idx(v[i], k)
            sent[i, idx] = v[i, idx]
            v[i, idx] = 0                           # crossed out of the ledger
            u[i, idx] = 0                           # momentum factor masking
        x = x - lr * sent.mean(0)
        want.append(np.linalg.norm(x - T.mean(0)))
    np.testing.assert_allclose(h.evals["error"], want, rtol=1e-10, atol=1e-12)


def test_the_settings_that_make_no_sense_are_refused():
    for bad, match in ((dict(optimizer=AdamW(), compressor=TopK(k=1)), "plain SGD"),
                       (dict(optimizer=SGD(lr=0.1, momentum=0.9), compressor=TopK(k=1)), "plain SGD"),
                       (dict(optimizer=SGD(lr=0.1)), "give a compressor"),
                       (dict(optimizer=SGD(lr=0.1), compressor=TopK(k=1), error_feedback=False), "give a compressor")):
        with pytest.raises(ValueError, match=match):
            DataParallel(momentum_correction=0.9, **bad)
    assert lx.per_step().label == "ddp topk-1%+ef+mc"
    with pytest.raises(ValueError, match="does not list its positions"):
        MomentumCorrected(Sign(), 0.9, masking=True)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_exchange_sentence_says_same_only_when_it_is(lang):
    rows = lx.exchange_seconds(params=8e9, workers=64, inner_steps=100, bits=8)
    slower = lx.exchange_seconds(params=8e9, workers=64, inner_steps=10, bits=8)
    with speaking(lang):
        same = lx.exchange_sentence(rows, params=8e9, inner_steps=100, bits=8)
        other = lx.exchange_sentence(slower, params=8e9, inner_steps=10, bits=8)
    word = {"en": "the same as DDP over InfiniBand", "zh": "与走 InfiniBand 的 DDP 一样"}[lang]
    assert word in same and "1.26" in same and same.count("1.26") == 2
    assert word not in other and "12.60" in other


def _rows(means, spread):
    rows = []
    for j, (H, mu) in enumerate(zip((1, 5, 20, 100), means)):
        losses = [mu - spread, mu, mu + spread][::(-1) ** j]     # seeds that do not move together
        rows.append({"H": H, "kB per worker": 800 / H, "test loss": mu, "losses": losses})
    return rows


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_myth_two_sentence_describes_the_whole_curve(lang):
    with speaking(lang):
        bumpy = demos.inner_steps_sentence(_rows([0.12, 0.21, 0.29, 0.15], 0.05))
        rising = demos.inner_steps_sentence(_rows([0.12, 0.15, 0.20, 0.40], 0.001))
    shape = {"en": ("neither rises nor falls", "rises with H"), "zh": ("既不随 H 稳定上升", "随 H 增大而上升")}[lang]
    level, worse = {"en": ("level with", "worse than"), "zh": ("持平", "差")}[lang]
    assert shape[0] in bumpy and "0.290" in bumpy and level in bumpy
    assert shape[1] in rising and shape[0] not in rising and worse in rising and level not in rising
