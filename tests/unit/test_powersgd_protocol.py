"""PowerSGD's DDP protocols, per matrix and batched (one square matrix per bucket), run by
N ranks in threads against the shared-basis algorithm in float64: the two all-reduces,
error feedback, warm start, bytes, and the state a checkpoint keeps."""
import threading

import pytest
import torch

from milktea import PowerSGD
from milktea.compressors import orthonormalize
from milktea.distributed import protocols
from milktea.distributed.protocols import Item
from milktea.distributed.protocols.lowrank import BatchedLowRank, LowRank

SHAPES = {"fc1.weight": (30, 7), "fc1.bias": (30,), "fc2.weight": (5, 30), "conv": (4, 3, 2, 2)}


class Group:
    """N ranks in threads: all_reduce sums the ranks' tensors in place, in rank order."""

    def __init__(self, n):
        self.n, self.barrier, self.slots = n, threading.Barrier(n), [None] * n

    def comm(self, rank):
        group = self

        class Comm:
            log = Log()

            def all_reduce(self, t, step):
                group.slots[rank] = t
                group.barrier.wait()
                total = sum(s.double() for s in group.slots)
                group.barrier.wait()
                t.copy_(total)
        return Comm()


class Log:
    def __init__(self):
        self.amounts = {}

    def add(self, step, **amounts):
        for k, v in amounts.items():
            self.amounts[k] = self.amounts.get(k, 0) + v


def grads(step, rank, names):
    g = torch.Generator().manual_seed(100 * step + rank)
    return {n: torch.randn(SHAPES[n], generator=g) for n in names}


def run_ranks(protos, names, steps, start=0):
    """Each rank's protocol on its gradients for `steps` steps; the averages per step."""
    group, out = Group(len(protos)), [[None] * len(protos) for _ in range(steps)]
    comms = [group.comm(r) for r in range(len(protos))]

    def work(rank):
        for s in range(steps):
            g = grads(start + s, rank, names)
            protos[rank].run(comms[rank], [Item(n, g[n]) for n in names], start + s)
            out[s][rank] = g
    threads = [threading.Thread(target=work, args=(r,)) for r in range(len(protos))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, comms


def reference(mats, Q, ledgers, N):
    """Shared-basis PowerSGD in float64: P = sum M_i Q, orthonormalise, Q = mean M_i^T P."""
    ms = [m + led for m, led in zip(mats, ledgers)]
    P = orthonormalize(sum(m @ Q for m in ms))
    qs = [m.t() @ P for m in ms]
    return P @ (sum(qs) / N).t(), sum(qs) / N, [m - P @ q.t() for m, q in zip(ms, qs)]


@pytest.mark.parametrize("N", [2, 3])
def test_per_matrix_matches_the_float64_reference(N):
    names = ["fc1.weight", "fc2.weight", "conv"]
    rank = 2
    protos = [LowRank(PowerSGD(rank), error_feedback=True, rank=r, world=N) for r in range(N)]
    out, _ = run_ranks(protos, names, steps=4)
    state = {}
    for s in range(4):
        for n in names:
            mats = [grads(s, r, names)[n].double().reshape(SHAPES[n][0], -1) for r in range(N)]
            Q, leds = state.get(n, (None, [0] * N))
            if Q is None:
                Q = torch.randn(mats[0].shape[1], rank, generator=torch.Generator().manual_seed(0)).double()
            approx, Q, leds = reference(mats, Q, leds, N)
            state[n] = (Q, leds)
            for r in range(N):
                assert torch.allclose(out[s][r][n].reshape(approx.shape).double(), approx, atol=1e-5), (s, n, r)
    for n in names:     # the ledger is what this rank's P Q^T missed
        assert torch.allclose(protos[0].ledgers[n].residual.double(), state[n][1][0], atol=1e-5)


def packed(tensors, n):
    flat = torch.zeros(n * n, dtype=torch.float64)
    cat = torch.cat([t.reshape(-1).double() for t in tensors])
    flat[: cat.numel()] = cat
    return flat.view(n, n)


@pytest.mark.parametrize("N", [2, 3])
def test_batched_is_one_square_matrix_per_bucket(N):
    names = list(SHAPES)                 # a bias and a 4-d tensor too: everything joins the matrix
    numel = sum(torch.Size(SHAPES[n]).numel() for n in names)
    n, rank = BatchedLowRank.side(numel), 3
    assert (n - 1) ** 2 < numel <= n * n
    protos = [BatchedLowRank(PowerSGD(rank, batched=True), error_feedback=True, rank=r, world=N)
              for r in range(N)]
    protos[-1].CHUNK = 7         # one rank decodes a few rows at a time: items straddle the chunks
    out, comms = run_ranks(protos, names, steps=4)
    Q = torch.randn(n, rank, generator=torch.Generator().manual_seed(0)).double()
    leds = [0] * N
    for s in range(4):
        mats = [packed(list(grads(s, r, names).values()), n) for r in range(N)]
        approx, Q, leds = reference(mats, Q, leds, N)
        for r in range(N):
            got = packed([out[s][r][k] for k in names], n)
            assert torch.allclose(got.reshape(-1)[:numel], approx.reshape(-1)[:numel], atol=1e-5), (s, r)
    key = "|".join(names)
    assert torch.allclose(protos[1].ledgers[key].residual.double(), leds[1].reshape(-1), atol=1e-5)
    assert torch.allclose(protos[0].coders[key].q.double(), Q, atol=1e-5)
    # the bytes: one P and one Q of n x rank float32 per step, nothing else
    assert comms[0].log.amounts["payload_bytes"] == 4 * 2 * n * rank * 4


def test_batched_state_round_trip_and_decode_in_chunks():
    names = list(SHAPES)
    def make(r):
        p = BatchedLowRank(PowerSGD(2, batched=True), error_feedback=True, rank=r, world=2)
        p.CHUNK = 7          # decode a few rows at a time: items straddle the chunks
        return p
    protos = [make(0), make(1)]
    run_ranks(protos, names, steps=2)
    saved = [p.state_dict() for p in protos]
    restored = [make(0), make(1)]
    for p, st in zip(restored, saved):
        p.load_state_dict(st)
    a, _ = run_ranks(protos, names, steps=1, start=2)
    b, _ = run_ranks(restored, names, steps=1, start=2)
    fresh, _ = run_ranks([make(0), make(1)], names, steps=1, start=2)
    for n in names:
        assert torch.equal(a[0][0][n], b[0][0][n])       # restored == never interrupted
    assert any(not torch.allclose(a[0][0][n], fresh[0][0][n]) for n in names)  # and the state mattered


def test_batched_is_an_option_of_powersgd():
    ps = PowerSGD(4, batched=True)
    assert protocols.protocol_of(ps) == "lowrank-batched" and ps.name == "powersgd-r4-batched"
    assert protocols.get("lowrank-batched").summed and protocols.collective_for(ps) == "allreduce"
    assert "batched=True" in repr(ps) and "batched" not in repr(PowerSGD(4))
    assert BatchedLowRank(ps).accepts((7,)) and not LowRank(PowerSGD(4)).accepts((7,))
    m = torch.outer(torch.arange(1.0, 5.0), torch.arange(1.0, 4.0))
    assert ps.compress(m) == PowerSGD(4).compress(m)      # one tensor: the same packet
    assert [BatchedLowRank.side(k) for k in (1, 2, 4, 5, 16, 17)] == [1, 2, 2, 3, 4, 5]
    with pytest.raises(TypeError, match="batched must be True or False"):
        PowerSGD(4, batched="yes")
    with pytest.raises(ValueError, match="rank must be >= 1"):
        PowerSGD(0, batched=True)


def test_probe_prices_one_p_and_one_q_per_bucket():
    from milktea import cost
    link = cost.Link.gbit(1)
    tensors = [torch.randn(SHAPES[n]) for n in SHAPES]
    numel = sum(t.numel() for t in tensors)
    n = BatchedLowRank.side(numel)
    codec_s, comm_s = BatchedLowRank(PowerSGD(2, batched=True), world=2).probe(tensors, link)
    assert codec_s > 0 and comm_s == pytest.approx(2 * cost.ring_allreduce_time(4 * n * 2, 2, link))
    per_matrix = LowRank(PowerSGD(2), world=2).probe([t for t in tensors if t.dim() > 1], link)
    assert per_matrix[0] > 0 and per_matrix[1] > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batched", [False, True])
def test_half_precision_buckets_keep_a_float32_ledger(dtype, batched):
    names = ["fc1.weight", "fc2.weight"]
    cls = BatchedLowRank if batched else LowRank
    half, full = (cls(PowerSGD(2, batched=batched), error_feedback=True, world=1) for _ in range(2))
    comm = Group(1).comm(0)
    for s in range(3):
        g = grads(s, 0, names)
        gh = {n: t.to(dtype) for n, t in g.items()}
        half.run(comm, [Item(n, gh[n]) for n in names], s)
        full.run(comm, [Item(n, g[n]) for n in names], s)
        for n in names:
            assert gh[n].dtype == dtype
            assert torch.allclose(gh[n].float(), g[n], atol=0.05, rtol=0.05), (s, n)
    assert all(led.residual.dtype == torch.float32 for led in half.ledgers.values())
