"""Honest numbers at the edges: huge values, exact zeros, NaN under "ignore",
half-precision ledgers, refused gradients, and the two kernel paths bit for bit."""
import pytest
import torch

from milktea import QSGD, Cast, Chain, ErrorFeedback, Quadratic, Quantize, RandomK, Sign, TernGrad, TopK, kernels
from milktea.bits import unpack
from milktea.compressors import sparse_decode
from milktea.cost import Link, fit_allreduce_link, ring_allreduce_time
from milktea.ledger import Ledger
from milktea.simulate import simulate
from milktea.experiments.gradients import flat_gradient

FMAX = torch.finfo(torch.float32).max


@pytest.fixture
def torch_path(monkeypatch):
    monkeypatch.setattr(kernels, "USE_NUMBA", False)


# -- overflow ----------------------------------------------------------------------
@pytest.mark.parametrize("comp", [Quantize(bits=8), Quantize(bits=4), Quantize(bits=2),
                                  Quantize(bits=4, stochastic=True), Sign(), QSGD(levels=4), TernGrad()],
                         ids=["int8", "int4", "int2", "int4-stoch", "sign", "qsgd", "terngrad"])
@pytest.mark.parametrize("path", ["numba", "torch"])
@pytest.mark.parametrize("n", [5, 70_000])
def test_huge_finite_values_decode_finite(comp, path, n, monkeypatch):
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 1e37
    x[:3] = torch.tensor([3e38, -FMAX, 1e20])
    out = comp.decompress(comp.compress(x))
    assert bool(torch.isfinite(out).all())
    if isinstance(comp, Quantize) and not comp.stochastic:
        # the entries at the chunk's max come back exactly within half a step of themselves
        assert float(out[1]) == pytest.approx(-FMAX, rel=1e-6)


def test_qsgd_norm_does_not_overflow():
    # |x| >= ~1e19 squared overflows float32: the norm used to be inf and every entry NaN
    x = torch.tensor([1e20, -3e19, 5.0, 0.0])
    q = QSGD(levels=4, chunk=None)
    trials = torch.stack([q.decompress(q.compress(x)) for _ in range(400)]).double()
    assert bool(torch.isfinite(trials).all())
    assert torch.allclose(trials.mean(0), x.double(), rtol=0.15, atol=1e18)   # still unbiased


# -- sign: zeros and the scale's precision -----------------------------------------
@pytest.mark.parametrize("path", ["numba", "torch"])
def test_sign_zeros_are_positive_and_scale_is_exact_mean(path, monkeypatch):
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    n = 100_003
    x = torch.rand(n, generator=torch.Generator().manual_seed(1)) + 1000   # float32 sums drift here
    x[::3] *= -1
    x[:4] = torch.tensor([0.0, -0.0, 2.0, -2.0])
    p = Sign().compress(x)
    bits = unpack(p.parts[0], 1, n)
    assert bits[:4].tolist() == [0, 0, 0, 1]                 # +0 and -0 are sent as +scale
    assert torch.equal(bits.bool(), x < 0)
    scale = float(p.parts[1].clone().view(torch.float32))
    exact = float(x.double().abs().sum() / n)
    assert scale == float(torch.tensor(exact, dtype=torch.float32))     # float64 sum, then rounded


# -- Top-K with NaN under nonfinite="ignore" ----------------------------------------
@pytest.mark.parametrize("n", [10, 100_000])
@pytest.mark.parametrize("approximate", [False, True])
def test_topk_ignore_passes_nan_through(n, approximate):
    x = torch.randn(n, generator=torch.Generator().manual_seed(2))
    x[3] = float("nan")
    comp = TopK(k=4, approximate=approximate, nonfinite="ignore")
    idx, vals = sparse_decode(comp.compress(x))
    assert 3 in idx.tolist() and bool(vals.isnan().any())    # NaN counts as the largest, like torch.topk


# -- the ledger ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["topk", "int8", "sign", "randomk", "topk+int8"])
def test_half_precision_ledger_keeps_the_invariant(dtype, name):
    make = {"topk": lambda: TopK(ratio=0.05), "int8": lambda: Quantize(bits=8), "sign": Sign,
            "randomk": lambda: RandomK(ratio=0.05), "topk+int8": lambda: Chain(TopK(ratio=0.05), Quantize(8))}
    ef = ErrorFeedback(make[name]())
    g = torch.Generator().manual_seed(3)
    fed = torch.zeros(2000, dtype=torch.float64)
    sent = torch.zeros(2000, dtype=torch.float64)
    for _ in range(30):
        grad = torch.randn(2000, generator=g).to(dtype)
        fed += grad.double()
        p = ef.compress(grad)
        assert p.dtype == dtype                               # the wire still carries the gradient's dtype
        sent += ef.decompress(p).double()
    assert ef.residual.dtype == torch.float32
    gap = float((sent + ef.residual.double() - fed).abs().max())
    assert gap < 1e-5 * float(fed.abs().max())                # float32 rounding, not bf16's (4e-3)


def test_refused_gradient_leaves_the_ledger_unchanged():
    ef = ErrorFeedback(Cast(torch.float16))
    g = torch.Generator().manual_seed(4)
    ef.compress(torch.randn(1000, generator=g) * 100)
    before, steps = ef.residual.clone(), ef.steps
    bad = torch.randn(1000, generator=g)
    bad[7] = 70_000.0                                         # beyond float16
    with pytest.raises(ValueError, match="left unchanged"):
        ef.compress(bad)
    assert torch.equal(ef.residual, before) and ef.steps == steps
    ef.compress(torch.randn(1000, generator=g))               # and the next call works
    with pytest.raises(ValueError, match="non-finite"):
        ef.compress(torch.full((1000,), float("nan")))
    # a first call that fails (k too large) leaves no ledger behind
    fresh = ErrorFeedback(TopK(k=50))
    with pytest.raises(ValueError, match="k=50"):
        fresh.compress(torch.randn(10))
    assert fresh.residual is None


def test_a_sparsifiers_ledger_step_is_exact():
    r = torch.randn(5000, generator=torch.Generator().manual_seed(5))
    for comp in (TopK(ratio=0.1), RandomK(ratio=0.1)):
        before = r.clone()
        ledger = Ledger()
        ledger.load_state_dict(r)
        p = ledger.step(comp, torch.zeros(5000))
        r = ledger.residual
        idx, vals = sparse_decode(p)
        assert torch.equal(vals, before[idx]) and bool((r[idx] == 0).all())
        keep = torch.ones(5000, dtype=torch.bool)
        keep[idx] = False
        assert torch.equal(r[keep], before[keep])
        r = before


# -- cost ------------------------------------------------------------------------------
def test_fit_allreduce_link_needs_two_sizes():
    with pytest.raises(ValueError, match="2 distinct message sizes"):
        fit_allreduce_link([1e6], [1e-3], 4)
    with pytest.raises(ValueError, match="2 distinct message sizes"):
        fit_allreduce_link([1e6, 1e6], [1e-3, 2e-3], 4)
    with pytest.raises(ValueError, match="one time per size"):
        fit_allreduce_link([1e3, 1e6], [1e-3], 4)
    link = Link(1e9, 20e-6)
    fit = fit_allreduce_link([1e7, 1e3], [ring_allreduce_time(m, 4, link) for m in (1e7, 1e3)], 4)
    assert fit.bandwidth == pytest.approx(link.bandwidth) and fit.latency == pytest.approx(link.latency)


# -- the numba and torch paths, bit for bit on a real gradient ------------------------
def _both_paths(fn, monkeypatch):
    if kernels.jit() is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(kernels, "NUMBA_MIN_NUMEL", 0)       # numba even for small tensors
    fast = fn()
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    slow = fn()
    monkeypatch.setattr(kernels, "USE_NUMBA", True)
    return fast, slow


def _gradients():
    g = flat_gradient()                                     # the digits MLP, mid-training
    edge = torch.zeros(3000)
    edge[1000:1100] = 1e-42                                   # subnormals, and a zero chunk before them
    edge[2048:2050] = torch.tensor([1.0, 0.5 / 127])          # exactly half a step: rounds up
    edge[2100:2200] = torch.linspace(-1, 1, 100) * FMAX
    return {"digits": g, "digits*1e-30": g * 1e-30, "edge": edge}


@pytest.mark.parametrize("bits, chunk", [(8, 1024), (8, 1000), (4, 1024), (4, 999), (2, 1024), (2, None)])
@pytest.mark.parametrize("which", ["digits", "digits*1e-30", "edge"])
def test_quantize_paths_are_bit_identical(bits, chunk, which, monkeypatch):
    x = _gradients()[which]
    q = Quantize(bits=bits, chunk=chunk)
    fast, slow = _both_paths(lambda: q.compress(x), monkeypatch)
    assert torch.equal(fast.parts[0], slow.parts[0])            # codes
    assert torch.equal(fast.parts[1], slow.parts[1])            # scales, as bytes
    a, b = _both_paths(lambda: q.decompress(fast), monkeypatch)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("which", ["digits", "edge"])
def test_sign_paths_agree_to_the_last_bit_of_the_scale(which, monkeypatch):
    x = _gradients()[which]
    fast, slow = _both_paths(lambda: Sign().compress(x), monkeypatch)
    assert torch.equal(fast.parts[0], slow.parts[0])            # the signs: identical
    a, b = (float(p.parts[1].clone().view(torch.float32)) for p in (fast, slow))
    # both sum |x| in float64, in different orders: the float32 scale may differ in its last bit
    assert abs(a - b) <= torch.finfo(torch.float32).eps * abs(a)
    d1, d2 = _both_paths(lambda: Sign().decompress(fast), monkeypatch)
    assert torch.equal(d1, d2)


def test_int8_training_is_the_same_on_both_paths(monkeypatch):
    # a gradient above NUMBA_MIN_NUMEL, so the default threshold picks numba
    run = lambda: simulate(Quadratic(70_000), Quantize(bits=8), workers=2, steps=8, progress=False,  # noqa: E731
                           eval_every=8).final("loss")
    fast, slow = _both_paths(run, monkeypatch)
    assert fast == slow
