"""A learning-rate schedule in the simulator, and DGC's warm-up in stages of several steps."""
import pytest
import torch

from milktea import DGC, warmup_ratio
from milktea.simulate import simulate
from milktea.tasks import Quadratic


def test_a_constant_schedule_is_the_number_bit_for_bit():
    task = Quadratic(50)
    run = dict(workers=2, steps=6, progress=False, eval_every=6, device="cpu")
    a = simulate(task, lr=0.1, **run)
    b = simulate(task, lr=lambda t: 0.1, **run)
    assert a.loss == b.loss


def test_the_schedule_is_read_step_by_step():
    task = Quadratic(50)
    run = dict(workers=1, steps=5, batch=None, progress=False, eval_every=5, device="cpu")
    frozen = simulate(task, lr=lambda t: 0.1 if t == 0 else 0.0, **run)
    assert frozen.loss[1] < frozen.loss[0] and frozen.loss[1:] == [frozen.loss[1]] * 4   # only step 0 moved
    with pytest.raises(ValueError, match="lr"):
        simulate(task, lr=lambda t: -1.0, **run)


def test_dgc_warm_up_holds_each_share_for_a_stage():
    dgc = DGC(ratio=0.01, momentum=0.0, approximate=False, warmup_steps=3, stage_steps=4)
    shares = []
    for _step in range(14):
        dgc.compress(torch.randn(1000))
        shares.append(dgc.compressor.ratio)
    expected = [warmup_ratio(t // 4, 0.01, 3) for t in range(14)]
    assert shares == expected and shares[0] == shares[3] != shares[4] and shares[-1] == 0.01
    with pytest.raises(ValueError):
        DGC(stage_steps=0)
