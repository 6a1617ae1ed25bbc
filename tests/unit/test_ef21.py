"""EF21 against a float64 reference written from the paper, its ledger's invariants, the
W workers at once (the simulator's rows), and chapter 04's case (classic error feedback stalls where EF21 does not)."""
import numpy as np
import pytest
import torch

from milktea import EF21, Quantize, Sign, TopK
from milktea.experiments import ledger as L
from milktea.i18n import speaking
from milktea.simulate import simulate
from milktea.tasks import Targets


def _topk(v: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros_like(v)
    idx = np.argsort(-np.abs(v), kind="stable")[:k]      # ties to the lowest index
    out[idx] = v[idx]
    return out


def _reference(targets: np.ndarray, k: int, lr: float, steps: int) -> list[float]:
    """EF21 (Richtárik et al. 2021, Algorithm 1) in float64, full gradients of
    f_i(x) = 0.5 ||x - t_i||^2: g_i <- g_i + C(grad_i(x) - g_i), g = mean g_i, x <- x - lr g.
    Returns ||x - mean t|| before the first step and after each one."""
    n, d = targets.shape
    x, gi = np.zeros(d), np.zeros((n, d))
    opt = targets.mean(0)
    out = [np.linalg.norm(x - opt)]
    for _ in range(steps):
        for i in range(n):
            gi[i] += _topk((x - targets[i]) - gi[i], k)
        x = x - lr * gi.mean(0)
        out.append(np.linalg.norm(x - opt))
    return out


@pytest.mark.parametrize("batched", [True, False])
def test_simulator_follows_the_float64_reference(batched):
    task = Targets(n_params=40, workers=5, spread=2.0, seed=3)
    h = simulate(task, EF21(TopK(k=3)), workers=5, steps=40, lr=0.2, batch=None, progress=False,
                 eval_every=1, device="cpu", batched=batched)
    want = _reference(task.targets.numpy(), 3, 0.2, 40)
    np.testing.assert_allclose(h.evals["error"], want, rtol=1e-10, atol=1e-13)
    assert h.scheme.endswith("+ef21")


def test_the_ledger_holds_what_head_office_does_not_know_yet():
    gen = torch.Generator().manual_seed(0)
    ef = EF21(Quantize(bits=2, chunk=None))
    head_office = torch.zeros(50, dtype=torch.float64)
    for _ in range(6):
        g = torch.randn(50, generator=gen, dtype=torch.float64)
        head_office += ef.decompress(ef.compress(g))
        torch.testing.assert_close(ef.estimate, head_office, rtol=0, atol=1e-12)
        torch.testing.assert_close(ef.estimate + ef.residual, g, rtol=0, atol=1e-12)
    # a constant gradient: what is owed keeps going out until head office knows it exactly
    ef = EF21(TopK(k=2))
    g = torch.tensor([4.0, -3.0, 2.0, 1.0, 0.5])
    for _ in range(3):
        ef.compress(g)
    assert torch.equal(ef.estimate, g) and not ef.residual.any()


def test_state_resumes_bit_for_bit_and_bad_input_is_refused():
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(30, generator=gen) for _ in range(6)]
    a = EF21(TopK(k=4))
    for g in grads[:3]:
        a.compress(g)
    b = EF21(TopK(k=4))
    b.load_state_dict(a.state_dict())
    for g in grads[3:]:
        pa, pb = a.compress(g), b.compress(g)
        assert pa.to_bytes() == pb.to_bytes()
    assert torch.equal(a.residual, b.residual) and torch.equal(a.last, b.last)
    with pytest.raises(ValueError, match="keep one EF21 per tensor"):
        a.compress(torch.randn(31))
    a.reset()
    assert a.last is None and a.residual is None and a.estimate is None
    with pytest.raises(TypeError, match="Compressor"):
        EF21("topk")
    with pytest.raises(ValueError):
        EF21(TopK(k=1)).compress(torch.tensor([1.0, float("nan")]))
    bf = EF21(TopK(k=1))                   # the change is kept at the ledger's precision
    assert bf.compress(torch.tensor([1.0, 2.0], dtype=torch.bfloat16)).dtype == torch.float32


@pytest.mark.parametrize("comp", [TopK(k=7), TopK(0.5), Sign(), Quantize(4, chunk=64), Quantize(4, stochastic=True)],
                         ids=repr)
def test_w_workers_at_once_is_the_per_worker_path(comp):
    W, n = 5, 211
    slow = [EF21(comp.fork(w)) for w in range(W)]
    fast = EF21(comp.fork(0))                   # the simulator's one copy for W rows
    gen = torch.Generator().manual_seed(2)
    for _ in range(4):
        G = torch.randn(W, n, generator=gen)
        packets = [s.compress(g) for s, g in zip(slow, G)]
        got = fast.compress_rows(G.clone())
        assert [p.to_bytes() for p in got] == [p.to_bytes() for p in packets]
        for w, a in enumerate(slow):
            assert torch.equal(a.residual, fast.residual[w]) and torch.equal(a.last, fast.last[w])


def test_the_simulator_runs_ef21_the_same_either_way():
    run = dict(workers=4, steps=8, batch=16, progress=False, device="cpu", eval_every=4)
    from milktea.tasks import Digits
    a = simulate(Digits(hidden=8), EF21(TopK(0.05)), batched=True, **run)
    b = simulate(Digits(hidden=8), EF21(TopK(0.05)), batched=False, **run)
    assert a.loss == b.loss and a.bytes_sent == b.bytes_sent and a.evals == b.evals


def test_classic_ledger_stalls_where_ef21_goes_on():
    case = L.ef21_case(seeds=range(2), steps=100, workers=4)
    classic, ef21 = (case.errors[r] for r in L.EF21_RUNS[1:])
    assert (case.halfway(L.EF21_RUNS[1]) > 0.5).all() and classic[:, -1].min() > 0.1 * classic[:, 0].max()
    assert (case.halfway(L.EF21_RUNS[2]) < 0.1).all() and ef21[:, -1].max() < 1e-3 * ef21[:, 0].min()
    text = L.ef21_sentence(case)
    assert "stopped closing in" in text and "still closing in over the second half in every seed" in text


def _fake_case(classic_end, ef21_end):
    steps = np.arange(0, 101, 10)
    curve = lambda end: np.array([np.geomspace(10.0, e, len(steps)) for e in end])   # noqa: E731
    return L.EF21Case([0, 1], steps, {L.EF21_RUNS[0]: curve([1e-9, 1e-9]), L.EF21_RUNS[1]: curve(classic_end),
                                      L.EF21_RUNS[2]: curve(ef21_end)}, 5, 100, 8, 0.1)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sentence_turns_with_the_numbers(lang):
    with speaking(lang):
        flipped = L.ef21_sentence(_fake_case([1e-6, 1e-7], [9.0, 8.0]))   # made-up: the other way round
        mixed = L.ef21_sentence(_fake_case([1e-6, 9.5], [1e-6, 1e-6]))
    if lang == "en":
        assert flipped.index("it was still closing in over the second half in every seed") < flipped.index("EF21")
        assert "it stopped closing in" in flipped.split("EF21")[-1]
        assert "in 1 of 2 seeds" in mixed
    else:
        assert "EF21" in flipped and "2 个随机种子中有 1 个" in mixed
        assert flipped.index("每个随机种子在后半程都还在继续靠近") < flipped.index("EF21")
