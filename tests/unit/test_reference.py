"""The hook's fast paths against the plain-torch reference (milktea/distributed/reference.py),
bit for bit: the fused ledger pass (the gradient added and zeroed in Top-K's selection),
the mean written onto the zeroed gradient, the compiled loops and torch's, fp32 and bf16;
and the MILKTEA_DEBUG trace that says which of them ran."""
import io

import pytest
import torch

from milktea import Chain, Quantize, TopK, kernels, trace
from milktea.compressors.sparse import Sparsifier, sparse_packet
from milktea.distributed import protocols
from milktea.distributed.reference import mean_of, topk_step


@pytest.fixture(params=["numba", "torch"])
def path(request, monkeypatch):
    if request.param == "numba":
        pytest.importorskip("numba")
    else:
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    return request.param


def _hook_round(protos, grads):
    """One bucket of one parameter through every rank's AllGather protocol, rank by rank:
    encode, the all-gather's result, decode. Returns each rank's averaged gradient."""
    items = [[protocols.Item("w", g.clone())] for g in grads]
    sent = [p.encode(it, None) for p, it in zip(protos, items)]
    parts = [payload for payload, _, _ in sent]
    heads = [payload[payload.numel() - tail:].numpy() for payload, tail, _ in sent]
    for p, it, (_, _, cleared) in zip(protos, items, sent):
        assert cleared == {"w"}          # the path under test: the gradient zeroed, then the mean on it
        p.decode(it, parts, heads, cleared)
    return [it[0].tensor for it in items]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", [3000, 200_000], ids=["small", "sampled"])  # 200k: a sampled threshold
def test_the_hooks_top_k_is_the_reference_bit_for_bit(path, dtype, n):
    ratio, world = 0.01, 3
    protos = [protocols.get("allgather")(TopK(ratio), error_feedback=True, rank=r, world=world)
              for r in range(world)]
    ledgers = [torch.zeros(n) for _ in range(world)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        grads = [torch.randn(n, generator=gen).to(dtype) for _ in range(world)]
        want = mean_of([topk_step(ledgers[r], grads[r], ratio) for r in range(world)], torch.empty(n, dtype=dtype))
        for r, got in enumerate(_hook_round(protos, grads)):
            assert torch.equal(got, want), f"rank {r}: the means differ"
            assert torch.equal(protos[r].ledgers["w"].residual, ledgers[r]), f"rank {r}: the ledgers differ"


def test_a_chain_through_the_hook_keeps_the_ledger_of_the_generic_step(path):
    # Top-K then int8 values: the chain's own step (through Top-K's fused one) leaves the
    # ledger the generic step leaves: compress the updated ledger, subtract what was decoded
    n, world = 100_000, 2
    protos = [protocols.get("allgather")(Chain(TopK(0.01), Quantize(8)), error_feedback=True, rank=r, world=world)
              for r in range(world)]
    ledgers = [torch.zeros(n) for _ in range(world)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        grads = [torch.randn(n, generator=gen) for _ in range(world)]
        _hook_round(protos, grads)
        for r in range(world):
            c = Chain(TopK(0.01), Quantize(8))
            ledgers[r] += grads[r]
            ledgers[r] -= c.decompress(c.compress(ledgers[r]))
            assert torch.equal(protos[r].ledgers["w"].residual, ledgers[r])


class OneRank:
    """A stand-in for the hook's communicator on one rank: it receives its own bytes."""
    log = None

    def all_gather_tailed(self, payload, tail, step):
        return [payload], [payload[payload.numel() - tail:].numpy()]


def test_the_debug_trace_says_which_path_ran(monkeypatch, path):
    monkeypatch.setattr(trace, "ENABLED", True)
    out = io.StringIO()
    proto = protocols.get("allgather")(TopK(0.01), error_feedback=True, rank=0, world=1)
    item = protocols.Item("fc.weight", torch.randn(100_000))
    with trace.bucket(7, 0, out=out):
        proto.run(OneRank(), [item], step=7)
    line = out.getvalue()
    assert line.startswith("milktea: rank 0 step 7: hook -> communication thread -> allgather: "), line
    assert "fc.weight 100000 topk-1% Ledger.step, fused add and clear" in line
    assert f", {path}, index " in line
    assert line.rstrip().endswith("-> all-gather of 1 ranks' packets -> decode_mean: onto the zeroed gradient "
                                  "-> future set"), line
    packet = TopK(0.01).compress(torch.randn(100_000))
    assert f"{packet.nbytes / 1e3:.1f} kB" in line or f"{(packet.nbytes + 1) / 1e3:.1f} kB" in line
    # a compressor whose selection is its own adds the gradient first: the trace says so
    out = io.StringIO()

    class Every(Sparsifier):
        codec = "topk"

        def select(self, flat, row=0):
            return torch.arange(0, flat.numel(), 100), None

        def _packet(self, t, idx, vals):
            return sparse_packet(t, idx, t.reshape(-1)[idx])
    proto = protocols.get("allgather")(Every(0.01), error_feedback=True, rank=0, world=1)
    item = protocols.Item("w", torch.randn(100_000))
    with trace.bucket(8, 0, out=out):
        proto.run(OneRank(), [item], step=8)
    assert "add, then encode" in out.getvalue() and "fused" not in out.getvalue()


def test_tracing_is_silent_when_off(capsys):
    assert not trace.ENABLED or pytest.skip("MILKTEA_DEBUG is set in this environment")
    proto = protocols.get("allgather")(TopK(0.01), error_feedback=True, rank=0, world=1)
    with trace.bucket(0, 0):
        proto.run(OneRank(), [protocols.Item("w", torch.randn(1000))], step=0)
    assert capsys.readouterr().err == ""
