"""One `encode` over W rows is bit for bit W workers' own calls: the same packets, the same
ledgers. The simulator's one call per stream (`simulate(batched=True)`) and its one call
per worker (`batched=False`) are the two sides of it."""
import pytest
import torch

from milktea import QSGD, Chain, ErrorFeedback, Quantize, RandomK, Sign, TernGrad, TopK
from milktea.ledger import Ledger
from milktea.simulate import simulate
from milktea.tasks import Digits

ROWS = [TopK(0.05), TopK(k=3, index="varint"), TopK(0.5), TopK(0.05, approximate=True), RandomK(0.1), Sign(),
        Quantize(8), Quantize(4, chunk=100), Quantize(2, chunk=None), Quantize(8, stochastic=True), QSGD(),
        TernGrad(), Chain(TopK(0.1), Quantize(8, stochastic=True))]


def _per_worker(senders, G):
    packets = [s.compress(g) for s, g in zip(senders, G)]
    return [p.to_bytes() for p in packets]


@pytest.mark.parametrize("comp", ROWS, ids=repr)
@pytest.mark.parametrize("ef", [True, False])
@pytest.mark.parametrize("n", [517, 70_000])       # torch selection over the matrix; the compiled loops
def test_one_call_equals_one_call_per_worker(comp, ef, n):
    W = 5
    workers = [ErrorFeedback(comp.fork(w, 3)) if ef else comp.fork(w, 3) for w in range(W)]
    rows, ledger = comp.fork(0, 3), Ledger()
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        G = torch.randn(W, n, generator=g)
        if step == 1:
            G = torch.randint(-3, 4, (W, n), generator=g).float()   # many ties at the k-th value
        want = _per_worker(workers, G)
        got = ledger.step_rows(rows, G.clone()) if ef else rows.encode(G.clone())[0]
        assert [p.to_bytes() for p in got] == want, step
        if ef:
            for w, worker in enumerate(workers):
                assert torch.equal(ledger.residual[w], worker.residual), (step, w)


@pytest.mark.parametrize("comp", [TopK(0.01), RandomK(0.05), Sign(), Quantize(8), Quantize(4, stochastic=True),
                                  TopK(0.05, approximate=True)], ids=repr)
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
    workers = [ErrorFeedback(TopK(0.5).fork(w)) for w in range(W)]
    rows, ledger = TopK(0.5), Ledger()
    G = torch.randint(-5, 6, (W, n), generator=torch.Generator().manual_seed(0)).float()
    want = _per_worker(workers, G)
    assert [p.to_bytes() for p in ledger.step_rows(rows, G.clone())] == want
    assert all(torch.equal(ledger.residual[w], s.residual) for w, s in enumerate(workers))


def test_a_nan_in_any_row_is_refused_as_one_worker_refuses_it():
    G = torch.ones(3, 10)
    G[2, 4] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        Ledger().step_rows(Sign(), G)


@pytest.mark.parametrize("ledger", ["ef", "dgc", "mc", "mc-int4", "ef21"])
def test_a_ready_made_ledger_steps_w_workers_at_once_as_each_alone(ledger):
    from milktea import DGC, EF21, MomentumCorrected
    make = {"ef": lambda: ErrorFeedback(TopK(0.05)), "dgc": lambda: DGC(0.05, momentum=0.9, clip=1.0, warmup_steps=2),
            "mc": lambda: MomentumCorrected(TopK(0.05), momentum=0.9, masking=True),
            "mc-int4": lambda: MomentumCorrected(Quantize(4, stochastic=True), momentum=0.5),
            "ef21": lambda: EF21(Sign())}[ledger]
    run = dict(workers=5, steps=8, batch=16, progress=False, device="cpu", eval_every=4)
    a = simulate(Digits(hidden=8), make(), batched=True, **run)
    b = simulate(Digits(hidden=8), make(), batched=False, **run)
    assert a.loss == b.loss and a.bytes_sent == b.bytes_sent and a.evals == b.evals
