"""milktea.fsdp.cost against references: the ZeRO paper's own memory figures, ring
collectives counted message by message, and packets really made."""
import pytest

from milktea import Quantize, TopK
from milktea.cost import Link
from milktea.fsdp import cost


def test_memory_matches_the_zero_papers_figure_1():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam
    # (2 bytes of fp16 weights, 2 of fp16 gradients, K = 12 of fp32 master copy and moments)
    def gb(stage):
        return cost.memory_per_rank(7.5e9, 64, stage=stage, param_bytes=2, grad_bytes=2,
                                    optimizer_bytes=12)["total"] / 1e9
    assert [round(gb(s), 1) for s in (0, 1, 2, 3)] == [120.0, 31.4, 16.6, 1.9]


def _ring(world, chunk_bytes, rounds):
    """Bytes one rank sends in a ring: each round it passes one chunk to its neighbour."""
    sent = [0] * world
    for _ in range(rounds):
        for r in range(world):
            sent[r] += chunk_bytes
    return sent[0]


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_collective_bytes_are_the_rings_messages(n):
    M = 1200.0
    assert cost.reduce_scatter_bytes(M, n) == pytest.approx(_ring(n, M / n, n - 1))
    assert cost.all_gather_bytes(M / n, n) == pytest.approx(_ring(n, M / n, n - 1))
    assert cost.all_to_all_bytes(10, n) == 10 * (n - 1)
    link = Link.gbit(1)
    assert cost.reduce_scatter_time(M, n, link) == pytest.approx((n - 1) * (link.latency + M / n / link.bandwidth))
    # FSDP's step: reduce-scatter + all-gather twice = 1.5x DDP's all-reduce (the ZeRO paper's 3 Psi vs 2 Psi)
    if n > 1:
        b = cost.step_bytes(1e6, n)
        assert b["total"] == pytest.approx(1.5 * cost.step_bytes(1e6, n, stage=0)["total"])
        assert cost.step_bytes(1e6, n, stage=2)["total"] == pytest.approx(cost.step_bytes(1e6, n, stage=0)["total"])


def test_compressed_bytes_and_the_ledgers_memory():
    q = Quantize(bits=8, chunk=256)
    per = cost.bytes_per_entry(q)
    x = __import__("torch").randn(65536)
    assert per == q.compress(x).nbytes / 65536             # a real packet's bytes
    assert cost.bytes_per_entry(None) == 4.0 and cost.bytes_per_entry(TopK(0.01)) < 0.1
    b = cost.step_bytes(1e6, 4, grad_bytes=per, weight_bytes=per, regathered=0.5e6)
    assert b["reduce_scatter"] == pytest.approx(0.75e6 * per) and b["all_gather_backward"] == pytest.approx(0.375e6 * per)
    m = cost.memory_per_rank(1e6, 4, ledger="worker")
    assert m["ledger"] == 3 * m["grads"]                   # what sharding saved, back
    assert cost.memory_per_rank(1e6, 4, ledger="shard")["ledger"] == m["grads"]
    with pytest.raises(ValueError):
        cost.step_bytes(1e6, 4, regathered=2e6)
    with pytest.raises(ValueError):
        cost.memory_per_rank(1e6, 4, ledger="server")


def test_milktea_cost_prices_zero_and_fsdp_with_the_same_functions():
    import milktea.cost
    for name in milktea.cost.SHARDED:
        assert getattr(milktea.cost, name) is getattr(cost, name), name
        assert name in dir(milktea.cost)
    from milktea.cost import step_bytes
    assert step_bytes(1e6, 4, stage=1) == cost.step_bytes(1e6, 4, stage=2)     # ZeRO-1 and 2 send alike
    with pytest.raises(AttributeError, match="no attribute 'zero_bytes'"):
        getattr(milktea.cost, "zero_bytes")  # noqa: B009
