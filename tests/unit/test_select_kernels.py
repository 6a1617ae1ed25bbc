"""Top-K's selection: the compiled loops (numba) against the torch reference, and error
feedback's ledger update fused into the selection's first pass."""
import pytest
import torch

from milktea import TopK, kernels
from milktea.compressors.registry import decode_add
from milktea.compressors.select import kth_largest_sorted_indices, select_topk
from milktea.compressors.sparse import Sparsifier, sparse_packet
from milktea.ledger import Ledger


def _numba_or_skip():
    if kernels.jit() is None:
        pytest.skip("numba is not installed")


@pytest.fixture(params=["numba", "torch"])
def path(request, monkeypatch):
    """Each test that takes it runs twice: through the compiled loops, and through torch."""
    if request.param == "numba":
        _numba_or_skip()
    else:
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    return request.param


def _reference(x, k):
    return kth_largest_sorted_indices(x.abs(), k)


@pytest.mark.parametrize("n, k", [(40_000, 1), (40_000, 400), (337_000, 3_370), (2_000_000, 20_000),
                                  (2_000_000, 1_999_999)])
def test_exact_selection_matches_the_reference(n, k):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + k))
    assert torch.equal(select_topk(x, k)[0], _reference(x, k))


@pytest.mark.parametrize("fused", [False, True])
def test_candidates_of_a_dense_block_are_read_again(fused):
    # the first pass keeps kernels.FOUND_PER_BLOCK positions per block; a block with more
    # (here one of large values among small ones, and a run split across the cap) is read
    # a second time: the candidates still come out complete and in order
    _numba_or_skip()
    n = 10 * kernels.BLOCK + 123
    x = torch.randn(n, generator=torch.Generator().manual_seed(3)) * 0.01
    x[3 * kernels.BLOCK: 4 * kernels.BLOCK] += 5.0                   # every entry of a block
    x[5 * kernels.BLOCK + 7: 5 * kernels.BLOCK + 7 + kernels.FOUND_PER_BLOCK + 1] = -2.0  # one too many
    x[-50:] = 3.0                                                    # the short last block
    add = torch.randn(n, generator=torch.Generator().manual_seed(4)) * 0.01 if fused else None
    want_x = x + add if fused else x.clone()
    want = (want_x.abs() >= 1.0).nonzero().reshape(-1)
    got, vals = kernels.above_threshold(x, 1.0, add)
    assert torch.equal(got, want)
    assert torch.equal(vals, want_x[want])   # each candidate's value, as found
    assert torch.equal(x, want_x)          # the fused pass left the sum in x


def test_ties_go_to_the_lowest_position_and_nan_counts_as_largest():
    _numba_or_skip()
    x = torch.zeros(100_000)
    x[::7] = 1.0          # 14,286 equal values; keep 1,000 of them: the first ones
    x[5] = -1.0           # same magnitude, negative
    x[50_000] = float("nan")
    x[3] = -0.0
    cand = torch.arange(x.numel())
    got = kernels.topk_among(cand, x, 1_000, x.numel())
    assert got is not None
    top, vals = got
    assert torch.equal(top, torch.sort(top).values)
    assert torch.equal(vals.view(torch.int32), x[top].view(torch.int32))   # NaN and -0.0 too
    assert 50_000 in top.tolist() and 5 in top.tolist()
    ones = [i for i in top.tolist() if i != 50_000 and i != 5]
    assert ones == list(range(0, 7 * len(ones), 7))
    y = torch.where(torch.isnan(x), torch.tensor(float("inf")), x)   # the reference has no NaN rule
    assert torch.equal(top, _reference(y, 1_000))


def own_step(comp, r, grad, clear=False):
    """A ledger step as the DDP hook takes it: the compressor's own encode (Top-K and Sign
    add the gradient in their own pass), `r` updated in place."""
    ledger = Ledger(check_first=False)
    ledger.load_state_dict(r)
    p = ledger.step(comp, grad, clear_grad=clear)
    r.copy_(ledger.residual)
    return p


def generic_step(comp, r, grad):
    """Error feedback's definition: r += grad; the packet of r (one row, `_compress`);
    r -= what it decodes to."""
    r.add_(grad)
    p = comp._compress(r)
    decode_add(p, r, -1.0)
    return p


@pytest.mark.parametrize("approximate", [False, True])
def test_fused_ledger_update_sends_and_keeps_what_the_plain_one_does(approximate, path):
    g = torch.Generator().manual_seed(1)
    shapes = [(600, 500), (70_000,), (5_000,), (3, 4)]
    for shape in shapes:
        r0, grad = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        plain, fused = TopK(0.01, approximate=approximate), TopK(0.01, approximate=approximate)
        r1, r2 = r0.clone(), r0.clone()
        p1 = generic_step(plain, r1, grad)
        p2 = own_step(fused, r2, grad)
        assert p1.to_bytes() == p2.to_bytes(), shape
        assert torch.equal(r1, r2), shape


@pytest.mark.parametrize("name", ["topk", "topk-approx", "randomk", "int8"])
def test_clear_grad_zeroes_the_gradient_and_changes_nothing_else(name, path):
    # the DDP hook asks the ledger pass to zero the gradient it reads (the mean is written
    # onto those zeros next): the packet and the ledger are those of the plain call
    from milktea import Quantize, RandomK
    make = {"topk": lambda: TopK(0.01), "topk-approx": lambda: TopK(0.01, approximate=True),
            "randomk": lambda: RandomK(0.01, seed=3), "int8": lambda: Quantize(bits=8)}[name]
    g = torch.Generator().manual_seed(5)
    for shape in [(600, 500), (70_000,), (3, 4)]:
        r0, grad = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        r1, r2, g2 = r0.clone(), r0.clone(), grad.clone()
        p1 = own_step(make(), r1, grad)
        p2 = own_step(make(), r2, g2, clear=True)
        assert p1.to_bytes() == p2.to_bytes() and torch.equal(r1, r2), shape
        assert torch.equal(g2, torch.zeros(shape)), shape
        # the mean written onto the cleared gradient is the mean written onto anything
        out = torch.full(shape, 7.0)
        make().decode_mean([p1, p2], out=out)
        assert torch.equal(make().decode_mean([p1, p2], out=g2, zeroed=True), out)


@pytest.mark.parametrize("name", ["topk+int8", "topk+sign", "approx+int4", "randomk+int8"])
def test_a_chains_own_feedback_step_matches_the_generic_one(name, path):
    # Chain's step goes through its first stage's (fused) encode and leaves the second
    # stage's rounding in the ledger: the packet and the ledger of the generic step, bit for bit
    from milktea import Chain, Quantize, RandomK, Sign
    make = {"topk+int8": lambda: Chain(TopK(0.01), Quantize(bits=8)),
            "topk+sign": lambda: Chain(TopK(0.01), Sign()),
            "approx+int4": lambda: Chain(TopK(0.01, approximate=True), Quantize(bits=4, chunk=64)),
            "randomk+int8": lambda: Chain(RandomK(0.01, seed=2), Quantize(bits=8))}[name]
    g = torch.Generator().manual_seed(6)
    for shape in [(600, 500), (70_000,), (3, 4)]:
        r0, grad = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        r1, r2, g2 = r0.clone(), r0.clone(), grad.clone()
        generic, own = make(), make()
        for _ in range(2):     # twice: the second step starts from a ledger with rounding in it
            p1 = generic_step(generic, r1, grad)
            p2 = own_step(own, r2, g2)
            assert p1.to_bytes() == p2.to_bytes(), shape
            assert torch.equal(r1.view(torch.int32), r2.view(torch.int32)), shape
        p3 = own_step(own, r2, g2, clear=True)
        assert torch.equal(g2, torch.zeros(shape)) and p3.shape == tuple(shape)


def test_signs_own_feedback_step_matches_the_generic_one(path):
    # Sign adds the gradient and packs in one pass: the generic step's packet and ledger
    from milktea import Sign
    g = torch.Generator().manual_seed(7)
    for shape in [(600, 500), (70_001,), (3, 4)]:
        r0, grad = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        grad.view(-1)[:5] = 0.0
        r0.view(-1)[:5] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.0])    # zero sums of both signs
        r1, r2, g2 = r0.clone(), r0.clone(), grad.clone()
        for _ in range(2):
            p1 = generic_step(Sign(), r1, grad)
            p2 = own_step(Sign(), r2, g2)
            assert p1.to_bytes() == p2.to_bytes(), shape
            assert torch.equal(r1.view(torch.int32), r2.view(torch.int32)), shape
        own_step(Sign(), r2, g2, clear=True)
        assert torch.equal(g2, torch.zeros(shape))
    if path == "numba":     # a NaN or an overflow raises, as Top-K's fused step does
        r, bad = torch.zeros(100_000), torch.randn(100_000)
        bad[77_777] = float("nan")
        with pytest.raises(ValueError, match="non-finite"):
            own_step(Sign(), r, bad)
        with pytest.raises(ValueError, match="non-finite"):
            own_step(Sign(), torch.full((100_000,), 3e38), torch.full((100_000,), 3e38))


def test_a_sparsifier_with_its_own_selection_gets_the_gradient_added():
    # a sparsifier that chooses its own positions (its `select`) is handed the ledger with
    # the gradient in it, cleared when asked; nothing is lost
    class EveryTenth(Sparsifier):
        codec = "topk"

        def select(self, flat, row=0):
            return torch.arange(0, flat.numel(), 10), None

        def _packet(self, t, idx, vals):
            return sparse_packet(t, idx, t.reshape(-1)[idx])
    grad = torch.randn(100_000, generator=torch.Generator().manual_seed(8))
    r, g = torch.zeros(100_000), grad.clone()
    p = own_step(EveryTenth(0.1), r, g, clear=True)
    assert torch.equal(g, torch.zeros(100_000))
    assert torch.equal(r + EveryTenth(0.1).decompress(p), grad)     # sent + kept = the gradient


def test_fused_ledger_update_refuses_a_nan_gradient():
    for n in (1_000, 500_000):     # the plain path (small) and the fused one
        r, grad = torch.zeros(n), torch.randn(n)
        grad[n // 3] = float("nan")
        with pytest.raises(ValueError, match="non-finite gradient: 1 of the"):
            own_step(TopK(0.01), r, grad)
    r, grad = torch.zeros(1_000), torch.randn(1_000)
    grad[0] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        own_step(TopK(0.01), r, grad)
    assert torch.equal(r, torch.zeros(1_000))          # the plain path leaves the ledger alone


def test_a_ledger_that_overflows_is_refused_too():
    _numba_or_skip()
    r = torch.full((200_000,), 3e38)
    grad = torch.full((200_000,), 3e38)
    with pytest.raises(ValueError, match="non-finite"):
        own_step(TopK(0.01), r, grad)


def test_other_compressors_add_the_gradient_through_the_same_step():
    from milktea import Quantize
    r, grad = torch.zeros(10), torch.arange(10.0)
    q = Quantize(bits=8)
    p = own_step(q, r, grad)
    assert torch.allclose(q.decompress(p) + r, grad)
    with pytest.raises(ValueError, match="non-finite"):
        own_step(q, torch.zeros(3), torch.tensor([0.0, float("nan"), 1.0]))


def test_numba_index_sizes_and_kth_match_torch(monkeypatch):
    _numba_or_skip()
    from milktea import index
    x = torch.randn(3_000_000, generator=torch.Generator().manual_seed(9))
    x[1_000_000:2_900_000] = 0                          # gaps of every varint length
    idx, _ = select_topk(x, 20_000)
    fast = index.sizes(idx, x.numel())
    # the sample is read in place: runs of 16 at the picked places, plus a gradient's
    g = torch.randn(x.numel(), generator=torch.Generator().manual_seed(10))
    pick = torch.randint(x.numel() // 16, (8192,), generator=torch.Generator().manual_seed(11))
    runs = (pick[:, None] * 16 + torch.arange(16)).reshape(-1)
    for add, sample in ((None, x[runs]), (g, x[runs] + g[runs])):
        want = float(torch.topk(sample.abs(), 1234).values[-1])
        assert kernels.sampled_kth_abs(x, add, pick, 16, 1234) == want
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    assert index.sizes(idx, x.numel()) == fast
    assert kernels.sampled_kth_abs(x, g, pick, 16, 1234) is None


def test_compiled_delta8_matches_torch_and_refuses_bad_bytes(monkeypatch):
    _numba_or_skip()
    from milktea import index
    x = torch.randn(2_000_000, generator=torch.Generator().manual_seed(4))
    x[100_000:900_000] = 0                                 # long gaps: escape bytes
    idx, _ = select_topk(x, 70_000)
    enc, data = index.encode(idx, x.numel(), "delta8")
    assert torch.equal(index.decode("delta8", data, idx.numel(), x.numel()), idx)
    with monkeypatch.context() as m:
        m.setattr(kernels, "USE_NUMBA", False)
        assert torch.equal(index.encode(idx, x.numel(), "delta8")[1], data)
    bad = [(data, idx.numel() + 1, x.numel()),             # announces more than it holds
           (data, idx.numel() - 1, x.numel()),             # fewer
           (data, idx.numel(), int(idx[-1])),              # a position past the end
           (torch.cat([data, torch.tensor([255, 3], dtype=torch.uint8)]), idx.numel(), x.numel())]
    for d, k, n in bad:
        with pytest.raises(ValueError, match="delta8"):
            index.decode("delta8", d, k, n)

