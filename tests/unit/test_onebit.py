"""1-bit Adam in the simulator: plain Adam during warm-up, then frozen v and 1-bit momentum."""
import math

import pytest
import torch

from milktea import Sign, TopK
from milktea.distributed.compressed_allreduce import chunk_bounds
from milktea.onebit import OneBitAdam
from milktea.simulate import simulate
from milktea.tasks import Digits

RUN = dict(workers=4, batch=32, progress=False, device="cpu")


def test_warmup_is_plain_adam_bit_for_bit_then_it_departs():
    a = OneBitAdam(lr=0.01, warmup=8)
    b = OneBitAdam(lr=0.01, warmup=None)
    ha = simulate(Digits(hidden=16), steps=12, optimizer=a, **RUN)
    hb = simulate(Digits(hidden=16), steps=12, optimizer=b, **RUN)
    assert ha.loss[:9] == hb.loss[:9]          # loss[t] is measured before step t: steps 0..7 agree
    assert ha.loss[9:] != hb.loss[9:]
    assert ha.bytes_sent[:8] == hb.bytes_sent[:8] == [[ha.dense_bytes] * 4] * 8


def test_adam_in_the_simulator_is_torch_adam_on_the_averaged_gradient():
    task = Digits(hidden=8, dtype=torch.float64)
    h = simulate(task, steps=6, optimizer=OneBitAdam(lr=0.02, warmup=None), workers=3, batch=None,
                 progress=False, device="cpu")
    model = task.model()
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    shards = task.shards(3)
    for t in range(6):
        grads, loss = [], 0.0
        for x, y in shards:
            model.zero_grad()
            l_ = task.loss(model(x), y).mean()
            l_.backward()
            loss += l_.item() / 3
            grads.append([p.grad.clone() for p in model.parameters()])
        assert h.loss[t] == pytest.approx(loss, rel=1e-10)
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / 3
        opt.step()
    assert h.final("loss") == pytest.approx(task.evaluate(model)["loss"], rel=1e-9)


def test_after_warmup_v_is_frozen_and_only_one_bit_momentum_crosses():
    opt = OneBitAdam(lr=0.01, warmup=20)
    task = Digits(hidden=16)
    h = simulate(task, steps=60, optimizer=opt, **RUN)
    st = opt.state
    assert st.t == 60 and st.compressing
    # v: what Adam held at the end of warm-up, never touched since
    assert torch.equal(st.v, st.adam.state[st.flat]["exp_avg_sq"]) and int(st.adam.state[st.flat]["step"]) == 20
    # the shared momentum is what the Sign packets carry: one magnitude per chunk
    n = task.n_params()
    for a, b in chunk_bounds(n, 4):
        assert st.m[a:b].abs().unique().numel() == 1
    # each worker's packets: n bits plus, per chunk, a 4-byte scale and a header
    for sent in h.bytes_sent[20:]:
        assert all(n / 8 < s < n / 8 + 4 * 24 for s in sent)
    assert h.loss[-1] < h.loss[0] / 3 and h.final("accuracy") > 0.85
    # entries that saw no gradient in warm-up (always-blank pixels) do not move afterwards
    assert (st.v == 0).any() and math.isinf(st.denom[st.v == 0][0])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="warmup must be >= 1, got 0"):
        OneBitAdam(warmup=0)
    with pytest.raises(TypeError, match="warmup must be an int"):
        OneBitAdam(warmup=2.5)
    with pytest.raises(ValueError, match="betas"):
        OneBitAdam(betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="Compressor"):
        OneBitAdam(compressor="sign")
    with pytest.raises(ValueError, match="compressor=None"):
        simulate(Digits(hidden=4), TopK(0.1), steps=1, optimizer=OneBitAdam(), **RUN)
    with pytest.raises(TypeError, match="OneBitAdam"):
        simulate(Digits(hidden=4), steps=1, optimizer=torch.optim.Adam, **RUN)
    assert "warmup 5" in OneBitAdam(warmup=5, compressor=Sign()).name


def test_onebit_adam_experiment_refuses_warmups_it_cannot_run():
    from milktea.experiments.quantization import onebit_adam
    for bad in ((), (0,), (12,), (True,), (2.5,)):
        with pytest.raises(ValueError, match="warmups"):
            onebit_adam(steps=12, warmups=bad, device="cpu")
