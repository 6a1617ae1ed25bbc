"""Momentum correction around a hook: the hook sees the worker's velocity, step after step."""
import pytest
import torch

from milktea.distributed import schemes
from milktea.distributed.momentum import MomentumCorrection
from milktea.experiments.commhook import FakeBucket


def test_the_inner_hook_sees_the_velocity():
    seen = []
    mc = MomentumCorrection(lambda b: seen.append(b.buffer().clone()), momentum=0.9)
    grads = [torch.randn(5, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    u = torch.zeros(5)
    for g in grads:
        u = 0.9 * u + g
        mc(FakeBucket(g.clone()))
        torch.testing.assert_close(seen[-1], u, rtol=0, atol=1e-6)


def test_each_bucket_has_its_own_velocity_and_a_new_size_starts_afresh():
    seen = []
    mc = MomentumCorrection(lambda b: seen.append(b.buffer().clone()), momentum=0.5)
    mc(FakeBucket(torch.ones(3), index=0))
    mc(FakeBucket(10 * torch.ones(2), index=1))
    mc(FakeBucket(torch.ones(3), index=0))
    assert seen[-1].tolist() == [1.5] * 3
    mc(FakeBucket(torch.ones(4), index=0))             # the bucket was rebuilt with another size
    assert seen[-1].tolist() == [1.0] * 4
    state = mc.state_dict()
    other = MomentumCorrection(lambda b: None, 0.1)
    other.load_state_dict(state)
    assert other.momentum == 0.5 and torch.equal(other.velocity[1], 10 * torch.ones(2))


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="callable"):
        MomentumCorrection(None, 0.9)
    with pytest.raises(ValueError):
        MomentumCorrection(lambda b: None, 1.0)


def test_the_corrected_schemes_keep_a_ledger_and_say_so():
    for name in schemes.MOMENTUM_CORRECTED:
        assert schemes.corrects_momentum(name) and schemes.uses_ledger(name) and name in schemes.SCHEMES
    assert not schemes.corrects_momentum("dense")
