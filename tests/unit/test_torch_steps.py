"""The torch paths (CUDA, small tensors, MILKTEA_NUMBA=0) read a tensor a step of
kernels.piece entries at a time, so that their temporaries stay a step's size: the steps
must not change a bit of any packet, decode or ledger (compared with one step for all)."""
import pytest
import torch

from compressor_zoo import ZOO
from milktea import ErrorFeedback, kernels
from milktea.compressors import QSGD, Quantize, TernGrad
from milktea.packet import Packet

CASES = {name: ZOO[name] for name in ("topk", "topk-approx", "int8", "int4", "int2", "int8-stochastic",
                                      "qsgd", "terngrad", "sign", "topk+int8", "topk+sign")}
CASES |= {"qsgd-chunk-300": lambda: QSGD(levels=4, chunk=300),      # chunks across steps
          "terngrad-chunk-1000": lambda: TernGrad(chunk=1000),
          "int4-stochastic-whole": lambda: Quantize(bits=4, chunk=None, stochastic=True),
          "int4-chunk-24": lambda: Quantize(bits=4, chunk=24)}


def _run(make, x):
    c = make()
    p = c.compress(x)
    ef = ErrorFeedback(make())
    sent = [ef.compress(x * (1 + i)).to_bytes() for i in range(2)]
    return p.to_bytes(), c.decompress(p), sent, ef.residual.clone()


@pytest.mark.parametrize("name", sorted(CASES))
def test_steps_change_no_bit(name, monkeypatch):
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    x = torch.randn(5003, generator=torch.Generator().manual_seed(1))
    x[17] = 40.0                                   # one chunk far larger than the rest
    monkeypatch.setattr(kernels, "TORCH_PIECE", 1 << 30)
    whole = _run(CASES[name], x)
    monkeypatch.setattr(kernels, "TORCH_PIECE", 64)
    steps = _run(CASES[name], x)
    assert steps[0] == whole[0]
    assert torch.equal(steps[1], whole[1])
    assert steps[2] == whole[2]
    if name == "sign":   # its scale is a float64 sum, in another order: the last bit may differ
        torch.testing.assert_close(steps[3], whole[3], rtol=1e-6, atol=1e-7)
    else:
        assert torch.equal(steps[3], whole[3])


def test_a_nan_in_a_late_step_is_found(monkeypatch):
    monkeypatch.setattr(kernels, "TORCH_PIECE", 64)
    x = torch.zeros(1000)
    assert kernels.all_finite(x)
    x[999] = float("nan")
    assert not kernels.all_finite(x)
    x[999] = 3e38                                  # finite, but the sum overflows
    x[998] = 3e38
    assert kernels.all_finite(x)
    x[5] = -float("inf")
    assert not kernels.all_finite(x)


@pytest.mark.parametrize("codec", ["qsgd", "terngrad"])
def test_a_malformed_code_in_a_late_step_writes_nothing(codec, monkeypatch):
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    monkeypatch.setattr(kernels, "TORCH_PIECE", 64)
    c = QSGD(levels=4) if codec == "qsgd" else TernGrad()
    p = c.compress(torch.randn(1000))
    bits = p.parts[0].clone()
    bits[-1] = 0xFF                                 # codes of 15 > 2 * levels, in the last step
    bad = Packet(p.codec, p.shape, p.dtype, p.params, (bits, p.parts[1]))
    out = torch.full((1000,), 7.0)
    with pytest.raises(ValueError, match="malformed"):
        c.decompress(bad, out=out)
    assert bool((out == 7.0).all())
