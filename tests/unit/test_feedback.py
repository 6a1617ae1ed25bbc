"""Error feedback keeps the ledger exact; DGC's momentum correction and warm-up."""
import pytest
import torch

from milktea import DGC, ErrorFeedback, Identity, Quantize, TopK, warmup_ratio
from milktea.compressors import sparse_decode
from milktea.ledger import Ledger

from compressor_zoo import ZOO


@pytest.mark.parametrize("name", sorted(ZOO))
def test_nothing_is_lost(name):
    ef = ErrorFeedback(ZOO[name]())
    g = torch.Generator().manual_seed(0)
    shape = (40, 50)
    fed = torch.zeros(shape, dtype=torch.float64)
    sent = torch.zeros(shape, dtype=torch.float64)
    for _ in range(12):
        grad = torch.randn(shape, generator=g)
        fed += grad.double()
        sent += ef.decompress(ef.compress(grad)).double()
    assert torch.allclose(sent + ef.residual.double(), fed, atol=1e-4)


def test_small_entry_waits_in_the_ledger_until_it_is_big():
    ef = ErrorFeedback(TopK(k=1))
    sent_at = None
    for step in range(10):
        p = ef.compress(torch.tensor([1.0, 0.3]))
        idx, vals = sparse_decode(p)
        if idx.tolist() == [1]:
            sent_at, value = step, float(vals[0])
            break
    # the 0.3 grows by 0.3 a step while the 1.0 keeps being sent; on the step it is
    # sent it carries everything it had accumulated
    assert sent_at is not None and value == pytest.approx(0.3 * (sent_at + 1))


def test_identity_feedback_is_transparent():
    ef = ErrorFeedback(Identity())
    x = torch.randn(7)
    assert torch.equal(ef.decompress(ef.compress(x)), x) and float(ef.residual.abs().max()) == 0


def test_ledger_checks_shape_and_input():
    ef = ErrorFeedback(TopK(k=1))
    ef.compress(torch.randn(5))
    with pytest.raises(ValueError, match="one ledger per tensor"):
        ef.compress(torch.randn(6))
    with pytest.raises(ValueError, match="non-finite"):
        ef.compress(torch.tensor([1.0, float("nan"), 0, 0, 0]))
    with pytest.raises(TypeError, match="Compressor"):
        ErrorFeedback("topk")


def test_state_dict_round_trip():
    a = ErrorFeedback(Quantize(bits=2))
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(100, generator=g) for _ in range(6)]
    for x in grads[:3]:
        a.compress(x)
    b = ErrorFeedback(Quantize(bits=2))
    b.load_state_dict(a.state_dict())
    for x in grads[3:]:
        assert a.compress(x) == b.compress(x)
    assert torch.equal(a.residual, b.residual)


def test_warmup_schedule():
    ratios = [warmup_ratio(s, 0.001, 4) for s in range(6)]
    assert ratios[0] == pytest.approx(0.25) and ratios[4:] == [0.001, 0.001]
    assert all(a > b for a, b in zip(ratios[:4], ratios[1:5]))          # shrinks every step
    assert ratios[2] == pytest.approx((0.25 * 0.001) ** 0.5)             # geometric midpoint
    with pytest.raises(ValueError):
        warmup_ratio(0, 2.0, 4)


def test_dgc_momentum_correction_and_masking():
    dgc = DGC(ratio=0.5, momentum=0.5, approximate=False)
    p = dgc.compress(torch.tensor([4.0, 1.0]))
    assert dgc.decompress(p).tolist() == [4.0, 0.0]
    assert dgc.velocity.tolist() == [0.0, 1.0]      # sent entry's momentum is masked
    assert dgc.residual.tolist() == [0.0, 1.0]
    p = dgc.compress(torch.tensor([0.0, 1.0]))
    # velocity = 0.5*1 + 1 = 1.5; residual = 1 + 1.5 = 2.5 on entry 1, 0 on entry 0
    assert dgc.decompress(p).tolist() == [0.0, 2.5]


def test_dgc_warmup_changes_the_kept_share():
    dgc = DGC(ratio=0.01, warmup_steps=3, start_ratio=0.5, approximate=False)
    counts = [sparse_decode(dgc.compress(torch.randn(1000)))[0].numel() for _ in range(5)]
    assert counts[0] == 500 and counts[-1] == 10 and counts[1] > counts[2] > counts[3]


def test_error_feedback_goes_through_the_compressors_encode():
    class Counting(Quantize):
        calls = 0

        def encode(self, rows, **options):
            Counting.calls += 1
            return super().encode(rows, **options)

    ef = ErrorFeedback(Counting(bits=4))
    x = torch.randn(300)
    p = ef.compress(x)
    assert Counting.calls == 1
    assert torch.allclose(ef.decompress(p) + ef.residual, x, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("clear", [False, True])
def test_a_ledger_step_subtracts_exactly_what_was_sent(name, clear):
    """Every compressor's encode, fused or not, leaves in the ledger exactly (ledger +
    gradient) - decode(packet): the definition of error feedback."""
    comp = ZOO[name]()
    g = torch.Generator().manual_seed(6)
    r, grad = (torch.randn(40, 50, generator=g, dtype=torch.float64) for _ in range(2))
    ledger = Ledger(check_first=False)
    ledger.load_state_dict(r)
    fed = grad.clone()
    p = ledger.step(comp, grad, clear_grad=clear)
    assert torch.equal(ledger.residual, (r + fed) - comp.decompress(p).double())
    assert float(grad.abs().max()) == 0 if clear else torch.equal(grad, fed)
