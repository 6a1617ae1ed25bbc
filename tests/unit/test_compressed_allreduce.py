"""The compressed all-reduce: chunks, both ledgers, the simulator, and real gloo ranks."""

import pytest
import torch

from milktea import Identity, Quantize, RandomK, Sign, TopK
from milktea.distributed.compressed_allreduce import CompressedAllReduce, chunk_bounds, simulate_round


CODECS = [Sign(), TopK(0.1), Quantize(4), RandomK(0.2), Quantize(8, stochastic=True)]


def test_chunks_cover_the_tensor_in_near_equal_pieces():
    for n, N in [(10, 3), (7, 7), (1000, 64), (5, 1)]:
        b = chunk_bounds(n, N)
        assert b[0][0] == 0 and b[-1][1] == n and len(b) == N
        assert all(e == s2 for (_, e), (s2, _) in zip(b, b[1:]))
        assert max(e - s for s, e in b) - min(e - s for s, e in b) <= 1
    with pytest.raises(ValueError, match="at least 4 entries"):
        chunk_bounds(3, 4)
    with pytest.raises(TypeError, match="Compressor"):
        CompressedAllReduce("sign", 0, 2)
    with pytest.raises(ValueError, match="rank must be < workers"):
        CompressedAllReduce(Sign(), 2, 2)


@pytest.mark.parametrize("comp", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("N", [1, 3, 4])
def test_two_sided_ledger_loses_nothing(comp, N):
    """N x (delivered averages + server residual) + worker residuals == all gradients fed in."""
    ranks = [CompressedAllReduce(comp, r, N) for r in range(N)]
    fed = torch.zeros(203, dtype=torch.float64)
    delivered = torch.zeros(203, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        xs = [torch.randn(203, generator=g) for _ in range(N)]
        fed += torch.stack(xs).double().sum(0)
        delivered += simulate_round(ranks, xs).double()
    server = torch.cat([r.server_residual().double() for r in ranks])
    workers = sum(r.worker_residual().double() for r in ranks)
    torch.testing.assert_close(N * (delivered + server) + workers, fed, rtol=0, atol=1e-4)
    assert workers.abs().sum() > 0                      # the ledgers did hold something
    # Random-K's server draws the very positions the workers drew (shared seed and step):
    # it passes on all it received and keeps nothing
    if isinstance(comp, RandomK):
        assert server.abs().sum() == 0
    elif N > 1:
        assert server.abs().sum() > 0


def test_the_result_is_the_average_of_the_compressed_chunks():
    N, n = 3, 50
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(r)) for r in range(N)]
    # lossless: the exact mean
    out = simulate_round([CompressedAllReduce(Identity(), r, N) for r in range(N)], xs)
    torch.testing.assert_close(out, torch.stack(xs).mean(0))
    # Sign, first step: each chunk is sign(mean of the workers' sign-coded chunks) x its mean |.|
    out = simulate_round([CompressedAllReduce(Sign(), r, N, error_feedback=False) for r in range(N)], xs)
    for a, b in chunk_bounds(n, N):
        coded = torch.stack([x[a:b].sign() * x[a:b].abs().mean() for x in xs]).mean(0)
        torch.testing.assert_close(out[a:b], coded.sign() * coded.abs().mean())


def test_the_simulator_runs_the_protocol_and_its_bytes_stay_flat():
    from milktea.simulate import simulate
    from milktea.tasks import Digits
    run = dict(steps=40, lr=0.1, progress=False, device="cpu", protocol="compressed_allreduce")
    task = Digits(hidden=16)
    per = {}
    for N in (2, 8):
        h = simulate(task, Sign(), workers=N, **run)
        per[N] = h.bytes_per_worker[-1]
        assert h.final("accuracy") > 0.6 and h.config["protocol"] == "compressed_allreduce"
    # a worker's compressed gradient: n/8 bytes of signs plus a scale and a header per chunk
    n = task.n_params()
    assert n / 8 < per[2] < per[8] < n / 8 + 8 * 24
    with pytest.raises(TypeError, match="plain compressor"):
        simulate(task, None, workers=2, **run)
    with pytest.raises(ValueError, match="protocol"):
        simulate(task, Sign(), workers=2, steps=2, progress=False, protocol="ring")


def test_the_protocol_is_registered_and_priced():
    from milktea.distributed.protocols import collective_for
    from milktea.distributed import protocols
    from milktea.distributed.compressed_allreduce import use_compressed_allreduce
    s = use_compressed_allreduce(Sign())
    assert protocols.protocol_of(s) == "compressed_allreduce" and Sign().protocol == "allgather"
    assert collective_for(s) == "compressed_allreduce"
    with pytest.raises(TypeError, match="Compressor"):
        use_compressed_allreduce("sign")


@pytest.mark.parametrize("name", ["milktea.distributed.compressed_allreduce", "milktea.onebit"])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, name


def test_state_dict_resumes_stochastic_rounding_bit_for_bit():
    from milktea import Quantize
    from milktea.distributed.compressed_allreduce import CompressedAllReduce, simulate_round
    W = 3
    gen = torch.Generator().manual_seed(5)
    xs = [[torch.randn(1000, generator=gen) for _ in range(W)] for _ in range(4)]

    def fresh():
        return [CompressedAllReduce(Quantize(4, stochastic=True), r, W, stream=7) for r in range(W)]

    ranks = fresh()
    for step in range(2):
        simulate_round(ranks, xs[step])
    saved = [r.state_dict() for r in ranks]
    expected = [simulate_round(ranks, xs[step]).clone() for step in (2, 3)]
    restored = fresh()
    for r, s in zip(restored, saved):
        r.load_state_dict(s)
    got = [simulate_round(restored, xs[step]) for step in (2, 3)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    # without its generators the rounding could not resume: such a state is refused, never
    # loaded silently. (A library compressor keeps its generator in its own state.)
    def forget(part):
        state = {**part["state"], "compressor": {k: v for k, v in part["state"].get("compressor", {}).items()
                                                 if k != "generator"}}
        return {**part, "generators": {}, "state": state}

    with pytest.raises(ValueError, match="random generator"):
        fresh()[0].load_state_dict({**saved[0], "senders": [forget(x) for x in saved[0]["senders"]],
                                    "server": forget(saved[0]["server"])})


def test_a_checkpoint_keeps_each_generator_once_and_resumes_exactly():
    """A library compressor's generator lives in its own state_dict (feedback and Chain
    pass it on), so coder_state adds none; a generator no state_dict keeps is still saved."""
    from milktea import QSGD, Chain, ErrorFeedback
    from milktea.distributed.checkpoint import coder_state, load_coder_state

    class Dither(Sign):       # a user's compressor: a generator of its own under another name
        def __init__(self):
            super().__init__()
            self.noise = torch.Generator().manual_seed(5)

        def compress(self, t):
            return super().compress(t + 0.1 * torch.randn(t.shape, generator=self.noise))

    makers = [lambda: QSGD(levels=4), lambda: ErrorFeedback(Quantize(4, stochastic=True)),
              lambda: Chain(TopK(0.2), QSGD(levels=4)), lambda: ErrorFeedback(Dither())]
    xs = [torch.randn(300, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    for make in makers:
        a = make()
        a = a.fork(rank=1, stream=3) if hasattr(a, "fork") else a    # a stream unlike a fresh copy's
        for x in xs[:2]:
            a.compress(x)
        saved = coder_state(a)
        assert list(saved["generators"]) == (["compressor.noise"] if isinstance(a, ErrorFeedback) and
                                             isinstance(a.compressor, Dither) else []), saved["generators"]
        b = make()
        load_coder_state(b, saved)
        for x in xs[2:]:
            assert a.compress(x).to_bytes() == b.compress(x).to_bytes()
