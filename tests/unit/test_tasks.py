import numpy as np
import pytest
import torch

from milktea.tasks import Digits, Quadratic


def test_quadratic_matches_the_seed_generator():
    np.random.seed(42)
    expected = np.random.randn(1000)
    task = Quadratic(1000, seed=42, dtype=torch.float64)
    np.testing.assert_array_equal(task.optimal.numpy(), expected)
    default = Quadratic(1000, seed=42)
    assert default.optimal.dtype == torch.float32 and default.model().w.dtype == torch.float32
    np.testing.assert_array_equal(default.optimal.numpy(), expected.astype(np.float32))
    assert repr(task) == "Quadratic(n_params=1000, seed=42, dtype=torch.float64)"


def test_quadratic_gradient_is_w_minus_optimal():
    task = Quadratic(50, seed=3, dtype=torch.float64)
    model = task.model()
    with torch.no_grad():
        model.w.copy_(torch.randn(50, dtype=torch.float64))
    (x, y), = task.shards(1)
    task.loss(model(x), y).mean().backward()
    torch.testing.assert_close(model.w.grad, model.w.detach() - task.optimal)
    ev = task.evaluate(model)
    d = (model.w.detach() - task.optimal).norm().item()
    assert ev["error"] == pytest.approx(d) and ev["loss"] == pytest.approx(0.5 * d * d)


def test_quadratic_noisy_shards_differ_but_center_on_optimal():
    task = Quadratic(200, seed=1, noise=0.5, samples=400)
    shards = task.shards(3)
    assert [x.shape for x, _ in shards] == [(400, 200)] * 3
    assert not torch.equal(shards[0][0], shards[1][0])
    assert (shards[0][0].mean(0) - task.optimal).abs().max() < 0.15
    assert torch.equal(task.shards(3)[2][0], shards[2][0])      # reproducible


def test_digits_split_and_standardization():
    a, b = Digits(seed=0), Digits(seed=0)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert len(a.y_train) + len(a.y_test) == 1797
    assert a.x_train.shape[1] == 64 and a.x_train.dtype == torch.float32
    mean, std = a.x_train.double().mean(0), a.x_train.double().std(0, unbiased=False)
    assert mean.abs().max() < 1e-5
    assert ((std - 1).abs() < 1e-4).sum() + (std == 0).sum() == 64
    # stratified: every class in the test split
    assert set(a.y_test.tolist()) == set(range(10))
    assert not torch.equal(Digits(seed=1).y_test, a.y_test)


@pytest.mark.parametrize("noniid", [False, True])
def test_digits_shards_cover_the_training_set_once(noniid):
    task = Digits(noniid=noniid)
    shards = task.shards(64)
    sizes = [len(y) for _, y in shards]
    assert sum(sizes) == len(task.y_train) and max(sizes) - min(sizes) <= 1
    rows = torch.cat([x for x, _ in shards])
    # the same multiset of rows as the training set
    key = lambda t: sorted(map(tuple, t.numpy().round(5).tolist()))  # noqa: E731
    assert key(rows) == key(task.x_train)
    labels_per_worker = [len(set(y.tolist())) for _, y in shards]
    if noniid:
        assert max(labels_per_worker) <= 2
    else:
        assert np.mean(labels_per_worker) > 5
    x, y = task.shard(5, 64)
    assert torch.equal(x, shards[5][0]) and torch.equal(y, shards[5][1])


def test_same_seed_same_initial_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    m1 = Digits(hidden=16, seed=7).model()
    after = torch.rand(3)
    assert torch.equal(before, after)
    m2 = Digits(hidden=16, seed=7).model()
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    m3 = Digits(hidden=16, seed=8).model()
    assert not torch.equal(next(m1.parameters()), next(m3.parameters()))
    assert isinstance(Digits(hidden=0).model(), torch.nn.Linear)
    assert Digits(hidden=16).n_params() == 64 * 16 + 16 + 16 * 10 + 10


def test_digits_trains_to_high_accuracy():
    task = Digits(hidden=32)
    model = task.model()
    untrained = task.evaluate(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(150):
        opt.zero_grad()
        task.loss(model(task.x_train), task.y_train).mean().backward()
        opt.step()
    ev = task.evaluate(model)
    assert untrained["accuracy"] < 0.3 and ev["accuracy"] > 0.93
    assert ev["loss"] < untrained["loss"]
    assert task.evaluate(model, split="train")["accuracy"] >= ev["accuracy"] - 0.02


def test_bad_input():
    with pytest.raises(ValueError, match="n_params"):
        Quadratic(0)
    with pytest.raises(ValueError, match="noise"):
        Quadratic(10, noise=-1.0)
    with pytest.raises(TypeError, match="dtype"):
        Quadratic(10, dtype=torch.int32)
    with pytest.raises(ValueError, match="hidden"):
        Digits(hidden=-1)
    with pytest.raises(ValueError, match="test_size"):
        Digits(test_size=1.5)
    with pytest.raises(ValueError, match="workers must be <="):
        Digits().shards(5000)
    with pytest.raises(ValueError, match="rank"):
        Digits().shard(8, 8)
    with pytest.raises(TypeError, match="workers"):
        Digits().shards(2.0)
    with pytest.raises(ValueError, match="split"):
        Digits().evaluate(Digits().model(), split="val")
