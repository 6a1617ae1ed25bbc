"""One ledger: the simulator's error feedback and the DDP hook's keep the same `Ledger`, so
for the same gradients they remember the same thing, bit for bit, bfloat16 included."""
import pytest
import torch

from milktea import Cast, Chain, ErrorFeedback, Quantize, Sign, TopK
from milktea.distributed import protocols
from milktea.ledger import Ledger
from milktea.simulate import _Exchange


class OwnPacketComm:
    """A stand-in for the hook's communicator in one process: every rank 'receives' its
    own bytes (the ledger is settled before anything arrives, so it does not care)."""
    log = None

    def __init__(self, world):
        self.world = world

    def all_gather_bytes(self, payload, step):
        return [payload] * self.world

    def all_gather_tailed(self, payload, tail, step):
        return [payload] * self.world, [payload[payload.numel() - tail:].numpy()] * self.world

    def all_reduce(self, tensor, step, op=None):
        pass


def _gradients(dtype, workers, n, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(workers, n, generator=g).to(dtype) for _ in range(steps)]


COMPRESSORS = {"topk": lambda: TopK(ratio=0.02), "sign": Sign, "int8": lambda: Quantize(bits=8),
               "topk+int8": lambda: Chain(TopK(ratio=0.05), Quantize(8))}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@pytest.mark.parametrize("n", [3000, 70_000], ids=["small", "compiled"])   # 70k: the numba kernels' size
def test_the_simulator_and_the_hook_keep_the_same_ledger(dtype, name, n):
    workers, steps = 2, 3
    make = COMPRESSORS[name]
    param = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
    sim = _Exchange(make(), True, workers, [("w", param)], param.detach().reshape(-1).clone(), per_layer=True)
    hook = [protocols.get(protocols.protocol_of(make()))(make(), error_feedback=True, rank=r, world=workers)
            for r in range(workers)]
    for G in _gradients(dtype, workers, n, steps):
        sim(G.clone())
        for r, proto in enumerate(hook):
            proto.run(OwnPacketComm(workers), [protocols.Item("w", G[r].clone())], step=0)
    for r in range(workers):
        mine, theirs = sim.ledgers[0][0].residual[r], hook[r].ledgers["w"].residual
        assert mine.dtype == theirs.dtype == torch.float32          # float32 for a bf16 model too
        assert torch.equal(mine, theirs), f"rank {r}: the ledgers differ by {float((mine - theirs).abs().max())}"


def test_a_bf16_hooks_ledger_remembers_what_a_bf16_ledger_would_round_away():
    proto = protocols.get("allgather")(TopK(ratio=0.01), error_feedback=True, rank=0, world=1)
    fed = torch.zeros(4000, dtype=torch.float64)
    sent = torch.zeros(4000, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        grad = torch.randn(4000, generator=g).to(torch.bfloat16)
        fed += grad.double()
        item = protocols.Item("w", grad.clone())
        proto.run(OwnPacketComm(1), [item], step=0)
        sent += item.tensor.double()                         # one rank: the mean is its own packet
    gap = float((sent + proto.ledgers["w"].residual.double() - fed).abs().max())
    assert gap < 1e-5 * float(fed.abs().max())               # float32's rounding; bf16's would be ~4e-3


def test_the_hook_refuses_a_gradient_beyond_float16_and_leaves_its_ledger():
    proto = protocols.get("allreduce")(Cast(torch.float16), error_feedback=True, rank=0, world=1)
    proto.run(OwnPacketComm(1), [protocols.Item("w", torch.full((64,), 3.0))], step=0)
    before = proto.ledgers["w"].residual.clone()
    bad = torch.ones(64)
    bad[5] = 70_000.0
    with pytest.raises(ValueError, match="left unchanged"):
        proto.run(OwnPacketComm(1), [protocols.Item("w", bad)], step=0)
    assert torch.equal(proto.ledgers["w"].residual, before)


def test_error_feedback_is_a_ledger_and_a_compressor():
    ef = ErrorFeedback(TopK(k=1))
    assert isinstance(ef.ledger, Ledger) and ef.residual is None
    ef.compress(torch.tensor([1.0, 2.0], dtype=torch.float16))
    assert ef.residual.dtype == torch.float32 and ef.residual.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="one ledger per tensor"):
        ef.compress(torch.ones(3))
    led = Ledger()
    led.load_state_dict(torch.ones(2, dtype=torch.bfloat16))
    assert led.residual.dtype == torch.float32          # a residual is kept in the ledger's dtype
    assert Ledger.dtype_for(torch.float64) == torch.float64


def test_check_first_leaves_a_refused_gradient_out_of_the_ledger():
    nan = torch.randn(100_000)
    nan[-1] = float("nan")
    for led in (Ledger(check_first=True), Ledger(check_first=False)):
        led.step(TopK(ratio=0.01), torch.ones(100_000))      # ties: the first 1000 are sent
        with pytest.raises(ValueError, match="non-finite"):
            led.step(TopK(ratio=0.01), nan)
        if led.check_first:
            assert float(led.residual.sum()) == 99_000.0     # as the first step left it
