import json

import pytest
import torch

from milktea.compressors import Identity, PowerSGD, Quantize, TopK, orthonormalize
from milktea.distributed.protocols import collective_for
from milktea.feedback import ErrorFeedback
from milktea.simulate import History, simulate
from milktea.tasks import Digits, Quadratic

RUN = dict(progress=False, device="cpu")


def worker_grads(task, model, shards):
    """One plain backward pass per worker on its whole shard: (per-worker grads, mean loss)."""
    grads, step_loss = [], 0.0
    for x, y in shards:
        model.zero_grad()
        loss = task.loss(model(x), y).mean()
        loss.backward()
        step_loss += loss.item() / len(shards)
        grads.append([p.grad.clone() for p in model.parameters()])
    return grads, step_loss


def reference_sgd(task, workers, steps, lr, momentum=0.0):
    """Plain PyTorch: one backward pass per worker on its whole shard, average, SGD step."""
    model = task.model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    shards = task.shards(workers)
    losses = []
    for _ in range(steps):
        grads, step_loss = worker_grads(task, model, shards)
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / workers
        opt.step()
        losses.append(step_loss)
    return model, losses


@pytest.mark.parametrize("compressor,workers,momentum", [(None, 5, 0.0), (None, 7, 0.9), (Identity(), 6, 0.5)])
def test_dense_matches_plain_sgd_on_full_shards(compressor, workers, momentum):
    task = Digits(hidden=16, dtype=torch.float64)
    hist = simulate(task, compressor, workers=workers, steps=15, lr=0.3, batch=None, momentum=momentum, **RUN)
    model, losses = reference_sgd(task, workers, 15, 0.3, momentum)
    torch.testing.assert_close(torch.tensor(hist.loss), torch.tensor(losses), rtol=1e-10, atol=1e-12)
    assert hist.final("loss") == pytest.approx(task.evaluate(model)["loss"], rel=1e-10)
    assert hist.final("accuracy") == task.evaluate(model)["accuracy"]


def test_equal_shards_average_is_the_full_batch_gradient():
    task = Digits(hidden=0, dtype=torch.float64)
    assert len(task.y_train) % 3 == 0          # 1437 = 3 x 479: the mean of the means is the mean
    hist = simulate(task, workers=3, steps=10, lr=0.5, batch=None, **RUN)
    model = task.model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for t in range(10):
        opt.zero_grad()
        loss = task.loss(model(task.x_train), task.y_train).mean()
        assert hist.loss[t] == pytest.approx(loss.item(), rel=1e-12)
        loss.backward()
        opt.step()
    assert hist.final("loss") == pytest.approx(task.evaluate(model)["loss"], rel=1e-12)


def test_quadratic_dense_is_closed_form():
    # w_t = w* (1 - (1 - lr)^t): the seed's dense baseline
    task = Quadratic(1000, seed=42, dtype=torch.float64)
    hist = simulate(task, workers=4, steps=60, lr=0.1, eval_every=20, **RUN)
    norm = task.optimal.norm().item()
    assert hist.eval_steps == [0, 20, 40, 60]
    for s, e in zip(hist.eval_steps, hist.evals["error"]):
        assert e == pytest.approx(0.9 ** s * norm, rel=1e-9)
    assert hist.final("error") == pytest.approx(0.0556, abs=5e-5)


def test_minibatches_are_drawn_without_replacement_and_seeded():
    task = Digits(hidden=8)
    a = simulate(task, workers=64, steps=20, batch=8, seed=3, **RUN)
    b = simulate(task, workers=64, steps=20, batch=8, seed=3, **RUN)
    c = simulate(task, workers=64, steps=20, batch=8, seed=4, **RUN)
    assert a.loss == b.loss and a.loss != c.loss
    # a batch larger than every shard is each worker's whole shard: no randomness left
    d = simulate(task, workers=64, steps=5, batch=1000, seed=1, **RUN)
    e = simulate(task, workers=64, steps=5, batch=None, seed=2, **RUN)
    assert d.loss == e.loss


def test_history_dense_bytes_and_serialisation():
    task = Digits(hidden=16)
    hist = simulate(task, workers=4, steps=12, eval_every=5, **RUN)
    n = task.n_params()
    assert hist.dense_bytes == 4 * n
    assert hist.bytes_sent == [[4 * n] * 4] * 12 and hist.ratio == 1.0
    assert hist.eval_steps == [0, 5, 10, 12] and hist.steps == 12
    d = json.loads(json.dumps(hist.to_dict()))
    assert d["scheme"] == "dense" and d["steps"] == 12 and len(d["evals"]["accuracy"]) == 4
    text = repr(hist)
    assert "digits" in text and "4 workers" in text and "accuracy" in text
    import matplotlib
    matplotlib.use("Agg")
    from milktea.plots.training import curve
    ax = curve(hist)
    curve(hist, ax=ax, x="bytes", metric="train loss")
    assert len(ax.lines) == 2
    with pytest.raises(ValueError, match="metric must be"):
        curve(hist, metric="speed")
    with pytest.raises(KeyError, match="accuracy"):
        simulate(Quadratic(10), steps=2, **RUN).final("accuracy")


def test_divergence_stops_with_a_warning():
    with pytest.warns(UserWarning, match="smaller lr"):
        hist = simulate(Quadratic(100), workers=2, steps=500, lr=5.0, **RUN)
    assert hist.diverged_at is not None and hist.steps == hist.diverged_at < 500
    assert "DIVERGED" in repr(hist)


def test_bad_arguments():
    task = Quadratic(10)
    with pytest.raises(TypeError, match="Task"):
        simulate("digits", **RUN)
    with pytest.raises(TypeError, match="compress"):
        simulate(task, object(), **RUN)
    with pytest.raises(ValueError, match="workers"):
        simulate(task, workers=0, **RUN)
    with pytest.raises(TypeError, match="steps"):
        simulate(task, steps=1.5, **RUN)
    with pytest.raises(ValueError, match="lr"):
        simulate(task, lr=-0.1, **RUN)
    with pytest.raises(TypeError, match="lr must be a number"):     # a wrong type is a TypeError
        simulate(task, lr="0.1", **RUN)
    with pytest.raises(TypeError, match="batch must be an int"):
        simulate(task, batch=8.0, **RUN)
    with pytest.raises(ValueError, match="batch"):
        simulate(task, batch=0, **RUN)
    with pytest.raises(ValueError, match="momentum"):
        simulate(task, momentum=1.0, **RUN)
    with pytest.raises(ValueError, match="eval_every"):
        simulate(task, eval_every=0, **RUN)
    with pytest.raises(ValueError, match="workers must be <="):
        simulate(Digits(), workers=10_000, **RUN)
    assert isinstance(simulate(task, steps=1, **RUN), History)


class Spy(TopK):
    """Top-K that writes down every packet it makes (shared by the per-worker copies)."""
    seen: list = []

    def encode(self, rows, **options):
        packets, sent = super().encode(rows, **options)
        Spy.seen.extend(len(p.to_bytes()) for p in packets)
        return packets, sent


@pytest.mark.parametrize("per_layer", [False, True])
def test_bytes_are_the_packets_real_bytes(per_layer):
    Spy.seen = []
    task = Digits(hidden=8)
    hist = simulate(task, Spy(ratio=0.05), workers=4, steps=6, per_layer=per_layer, **RUN)
    per_worker = 4 if per_layer else 1                        # packets per worker per step
    assert len(Spy.seen) == 6 * 4 * per_worker
    it = iter(Spy.seen)
    expected = [[0] * 4 for _ in range(6)]
    for t in range(6):
        for _ in range(per_worker):                           # streams outermost, then workers
            for w in range(4):
                expected[t][w] += next(it)
    assert hist.bytes_sent == expected
    assert hist.ratio == pytest.approx(hist.dense_bytes * 6 * 4 / sum(map(sum, expected)))
    assert 5 < hist.ratio < 20          # 5% of the values, plus indices and headers


def test_identity_bytes_include_the_header():
    hist = simulate(Quadratic(1000), Identity(), workers=2, steps=3, **RUN)
    packet = Identity().compress(torch.zeros(1000))
    assert hist.bytes_sent == [[packet.nbytes] * 2] * 3
    assert packet.nbytes > 4000 and hist.ratio == pytest.approx(4000 / packet.nbytes)


@pytest.mark.parametrize("seed", [0, 1])
def test_error_feedback_rescues_top_k_on_digits(seed):
    task = Digits(seed=seed)
    run = dict(workers=16, steps=150, lr=0.1, seed=seed, eval_every=50, **RUN)
    ef = simulate(task, TopK(ratio=0.01), error_feedback=True, **run)
    plain = simulate(task, TopK(ratio=0.01), error_feedback=False, **run)
    dense = simulate(task, None, **run)
    assert ef.ratio > 50 and plain.ratio > 50
    assert ef.final("accuracy") > 0.88
    assert ef.final("accuracy") - plain.final("accuracy") > 0.15
    assert dense.final("accuracy") - ef.final("accuracy") < 0.05
    assert ef.scheme == "topk-1%+ef" and plain.scheme == "topk-1%"


def test_each_worker_has_its_own_ledger():
    # one worker's gradient is zero on the quadratic only if its data equal w: use noisy data
    task = Quadratic(200, seed=0, noise=1.0, samples=3, dtype=torch.float64)
    a = simulate(task, TopK(k=5), workers=3, steps=4, batch=None, **RUN)
    # rebuild by hand: three ledgers fed the three workers' own gradients
    ledgers = [ErrorFeedback(TopK(k=5)) for _ in range(3)]
    shards = task.shards(3)
    w = torch.zeros(200, dtype=torch.float64)
    for _ in range(4):
        packets = [ef.compress(w - x.mean(0)) for ef, (x, _) in zip(ledgers, shards)]
        w -= 0.1 * TopK(k=5).aggregate(packets) / 3
    assert a.final("error") == pytest.approx((w - task.optimal).norm().item(), rel=1e-12)


def test_powersgd_matches_the_two_allreduce_algorithm():
    """Reference: PowerSGD as a DDP hook runs it, worker by worker with local ledgers:
    P = sum_w M_w Q, orthonormalise, Q = sum_w M_w^T P, update = P Q^T / N."""
    task = Digits(hidden=12, dtype=torch.float64)
    workers, steps, lr, rank = 3, 6, 0.3, 2
    hist = simulate(task, PowerSGD(rank=rank), workers=workers, steps=steps, lr=lr, batch=None, **RUN)
    assert hist.config["per_layer"] is True

    model = task.model()
    params = list(model.parameters())
    shards = task.shards(workers)
    residual = [[torch.zeros_like(p) for p in params] for _ in range(workers)]
    qs = [None] * len(params)
    losses = []
    for _ in range(steps):
        grads, step_loss = worker_grads(task, model, shards)
        losses.append(step_loss)
        with torch.no_grad():
            for i, p in enumerate(params):
                m = [residual[w][i] + grads[w][i] for w in range(workers)]
                if p.dim() < 2:
                    p -= lr * sum(m) / workers
                    residual_i = [torch.zeros_like(p)] * workers
                else:
                    if qs[i] is None:
                        qs[i] = torch.randn(p.shape[1], rank, generator=torch.Generator().manual_seed(0))
                    P = orthonormalize(sum(mw.float() @ qs[i] for mw in m))
                    Qw = [mw.float().t() @ P for mw in m]
                    qs[i] = sum(Qw)
                    p -= lr * (P @ qs[i].t()).double() / workers
                    residual_i = [mw - (P @ q.t()).double() for mw, q in zip(m, Qw)]
                for w in range(workers):
                    residual[w][i] = residual_i[w]
    torch.testing.assert_close(torch.tensor(hist.loss), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    assert hist.final("loss") == pytest.approx(task.evaluate(model)["loss"], rel=1e-5)
    assert 1 < hist.ratio < 10


def test_collective_for_the_real_compressors():
    assert collective_for(None) == "allreduce"
    assert collective_for(Identity()) == "allreduce"
    assert collective_for(PowerSGD(rank=2)) == "allreduce"
    assert collective_for(TopK(ratio=0.01)) == "allgather"
    assert collective_for(Quantize(bits=8)) == "allgather"
    assert collective_for(ErrorFeedback(TopK(ratio=0.01))) == "allgather"


def test_a_ready_made_ledger_is_copied_per_worker():
    from milktea.feedback import DGC
    task = Digits()
    dgc = DGC(ratio=0.01, momentum=0.9)
    hist = simulate(task, dgc, workers=8, steps=100, lr=0.05, eval_every=100, **RUN)
    assert hist.scheme == dgc.name and dgc.steps == 0      # the original ledger is untouched
    assert hist.final("accuracy") > 0.85 and hist.ratio > 30
