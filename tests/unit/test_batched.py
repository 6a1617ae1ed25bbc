"""The simulator's batched path is bit for bit the per-worker path."""
import pytest
import torch

from milktea import ErrorFeedback, Quantize, RandomK, Sign, TopK
from milktea.batched import batch_for, supported
from milktea.simulate import simulate
from milktea.tasks import Digits

BATCHED = [TopK(0.05), TopK(k=3, index="varint"), TopK(0.5), RandomK(0.1), Sign(), Quantize(8),
           Quantize(4, chunk=100), Quantize(2, chunk=None)]


def _per_worker(senders, G):
    packets = [s.compress(g) for s, g in zip(senders, G)]
    codec = senders[0].compressor if isinstance(senders[0], ErrorFeedback) else senders[0]
    return codec.aggregate(packets), [p.nbytes for p in packets]


@pytest.mark.parametrize("comp", BATCHED, ids=repr)
@pytest.mark.parametrize("ef", [True, False])
def test_one_call_equals_one_call_per_worker(comp, ef):
    W, n = 6, 517
    make = lambda: [ErrorFeedback(comp.fork(w)) if ef else comp.fork(w) for w in range(W)]  # noqa: E731
    slow, fast = make(), make()
    batch = batch_for(fast, (n,))
    assert batch is not None
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        G = torch.randn(W, n, generator=g)
        if step == 1:
            G = torch.randint(-3, 4, (W, n), generator=g).float()   # many ties at the k-th value
        assert supported(G, batch)
        want, want_sizes = _per_worker(slow, G)
        got, sizes = batch(G.clone())
        assert torch.equal(got, want) and sizes == want_sizes, step
        if ef:
            for a, b in zip(slow, fast):
                assert torch.equal(a.residual, b.residual) and a.steps == b.steps


def test_what_is_not_batched():
    from milktea import DGC, QSGD, Chain
    for senders in ([TopK(0.1, approximate=True)] * 2, [Quantize(8, stochastic=True)] * 2, [QSGD()] * 2,
                    [DGC(0.1)] * 2, [Chain(TopK(0.1), Quantize(8))] * 2, [Sign(nonfinite="zero")] * 2):
        assert batch_for(senders, (10,)) is None
    batch = batch_for([Sign(), Sign()], (10,))
    assert not supported(torch.tensor([[1.0] * 9 + [float("nan")]] * 2), batch)
    assert not supported(torch.ones(2, 10, dtype=torch.float64), batch)     # Sign computes in float32


@pytest.mark.parametrize("comp", [TopK(0.01), RandomK(0.05), Sign(), Quantize(8), Quantize(4)], ids=repr)
@pytest.mark.parametrize("ef", [True, False])
def test_the_simulator_gives_the_same_run_either_way(comp, ef):
    run = dict(workers=7, steps=12, batch=16, error_feedback=ef, progress=False, device="cpu", eval_every=4)
    for per_layer in (False, True):
        a = simulate(Digits(hidden=8), comp, batched=True, per_layer=per_layer, **run)
        b = simulate(Digits(hidden=8), comp, batched=False, per_layer=per_layer, **run)
        assert a.loss == b.loss and a.bytes_sent == b.bytes_sent and a.evals == b.evals


def test_float64_topk():
    run = dict(workers=4, steps=6, progress=False, device="cpu")
    a = simulate(Digits(hidden=8, dtype=torch.float64), TopK(0.02), batched=True, **run)
    b = simulate(Digits(hidden=8, dtype=torch.float64), TopK(0.02), batched=False, **run)
    assert a.loss == b.loss and a.bytes_sent == b.bytes_sent


def test_large_k_takes_the_kthvalue_path_with_the_same_result():
    W, n = 3, 3001                          # k = 1500 > 1024: the k-th value comes from kthvalue
    slow = [ErrorFeedback(TopK(0.5).fork(w)) for w in range(W)]
    fast = [ErrorFeedback(TopK(0.5).fork(w)) for w in range(W)]
    batch = batch_for(fast, (n,))
    G = torch.randint(-5, 6, (W, n), generator=torch.Generator().manual_seed(0)).float()
    want, want_sizes = _per_worker(slow, G)
    got, sizes = batch(G.clone())
    assert torch.equal(got, want) and sizes == want_sizes
    assert all(torch.equal(a.residual, b.residual) for a, b in zip(slow, fast))
