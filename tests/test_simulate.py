import json

import pytest
import torch

from milktea.simulate import History, simulate
from milktea.tasks import Digits, Quadratic

RUN = dict(progress=False, device="cpu")


def reference_sgd(task, workers, steps, lr, momentum=0.0):
    """Plain PyTorch: one backward pass per worker on its whole shard, average, SGD step."""
    model = task.model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    shards = task.shards(workers)
    losses = []
    for _ in range(steps):
        grads, step_loss = [], 0.0
        for x, y in shards:
            model.zero_grad()
            loss = task.loss(model(x), y).mean()
            loss.backward()
            step_loss += loss.item() / workers
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / workers
        opt.step()
        losses.append(step_loss)
    return model, losses


@pytest.mark.parametrize("workers,momentum", [(5, 0.0), (7, 0.9)])
def test_dense_matches_plain_sgd_on_full_shards(workers, momentum):
    task = Digits(hidden=16, dtype=torch.float64)
    hist = simulate(task, workers=workers, steps=15, lr=0.3, batch=None, momentum=momentum, **RUN)
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
    task = Quadratic(1000, seed=42)
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
    ax = hist.plot()
    hist.plot(ax=ax, x="bytes", metric="train loss")
    assert len(ax.lines) == 2
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
    with pytest.raises(ValueError, match="batch"):
        simulate(task, batch=0, **RUN)
    with pytest.raises(ValueError, match="momentum"):
        simulate(task, momentum=1.0, **RUN)
    with pytest.raises(ValueError, match="eval_every"):
        simulate(task, eval_every=0, **RUN)
    with pytest.raises(ValueError, match="workers must be <="):
        simulate(Digits(), workers=10_000, **RUN)
    assert isinstance(simulate(task, steps=1, **RUN), History)
