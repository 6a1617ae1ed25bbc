"""Every compressor against a brute-force or float64 reference."""
import numpy as np
import pytest
import torch

from milktea import (QSGD, Cast, Chain, Identity, PowerSGD, Quantize, RandomK, Sign, TernGrad,
                     TopK, kernels)
from milktea.compressors import orthonormalize, sparse_decode
from milktea.compressors.select import SMALL

from compressor_zoo import ZOO, make_input


def reference_topk(x: torch.Tensor, k: int) -> np.ndarray:
    """The k largest |x| by a full sort in float64; ties -> lowest index."""
    a = np.abs(x.double().reshape(-1).numpy())
    order = np.lexsort((np.arange(a.size), -a))   # primary: -|x|, secondary: index
    return np.sort(order[:k])


@pytest.mark.parametrize("n, k", [(1, 1), (10, 1), (10, 10), (1000, 37), (SMALL * 4, 1),
                                  (SMALL * 4, 50), (SMALL * 4, 1311), (300_000, 3000),
                                  (300_000, 150_000)])
def test_topk_exact_matches_full_sort(n, k):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + k))
    p = TopK(k=k).compress(x)
    idx, vals = sparse_decode(p)
    assert idx.numel() == k
    assert np.array_equal(idx.numpy(), reference_topk(x, k))
    assert torch.equal(vals, x[idx])


@pytest.mark.parametrize("n", [1000, 200_000])
def test_topk_ties_are_broken_toward_low_index(n):
    # integers: huge numbers of exact ties at the threshold
    x = torch.randint(-3, 4, (n,), generator=torch.Generator().manual_seed(1)).float()
    for k in (1, 7, n // 3):
        idx, _ = sparse_decode(TopK(k=k).compress(x))
        assert np.array_equal(idx.numpy(), reference_topk(x, k))
    idx, _ = sparse_decode(TopK(k=5).compress(torch.zeros(n)))
    assert idx.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_topk_other_dtypes(dtype):
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(3)).to(dtype)
    idx, vals = sparse_decode(TopK(k=999).compress(x))
    assert np.array_equal(idx.numpy(), reference_topk(x, 999))
    assert vals.dtype == dtype


@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_approximate_topk_count_within_5_percent(ratio, seed):
    n = 500_000
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) ** 3   # heavy tails
    k = round(ratio * n)
    idx, vals = sparse_decode(TopK(ratio, approximate=True, seed=seed).compress(x))
    assert abs(idx.numel() - k) <= 0.05 * k
    # what is kept is a threshold set: nothing left out is larger than anything kept
    keep = torch.zeros(n, dtype=torch.bool)
    keep[idx] = True
    assert x[keep].abs().min() >= x[~keep].abs().max()


def test_randomk_sends_no_indices_and_is_reproducible():
    x = torch.randn(10_000)
    a, b = RandomK(k=100, seed=7), RandomK(k=100, seed=7)
    pa, pb = a.compress(x), b.compress(x)
    ia, _ = sparse_decode(pa)
    assert torch.equal(ia, sparse_decode(pb)[0])           # workers agree without talking
    assert ia.unique().numel() == 100
    assert pa.payload_nbytes == 100 * 4                     # values only
    assert not torch.equal(ia, sparse_decode(a.compress(x))[0])   # a new step, new positions


def test_randomk_large_tensor_path():
    idx, _ = sparse_decode(RandomK(k=5000, seed=1).compress(torch.randn(3_000_000)))
    assert idx.unique().numel() == 5000 and int(idx.max()) < 3_000_000


def _half_steps(p, n):
    bits, chunk, _ = p.params
    scales = p.parts[1].clone().view(torch.float32)
    return scales.repeat_interleave(chunk)[:n] / 2


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("chunk", [None, 1000, 4096])
@pytest.mark.parametrize("path", ["torch", "numba"])
def test_quantize_error_at_most_half_a_step(bits, chunk, path, monkeypatch):
    if path == "numba" and kernels.jit() is None:
        pytest.skip("numba is not installed")
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    n = 150_001                                        # not a multiple of the chunk
    x = torch.randn(n, generator=torch.Generator().manual_seed(bits)) * torch.linspace(0.01, 10, n)
    q = Quantize(bits=bits, chunk=chunk)
    p = q.compress(x)
    err = (q.decompress(p).double() - x.double()).abs()
    assert bool((err <= _half_steps(p, n).double() * (1 + 1e-5) + 1e-12).all())
    # each code really costs `bits` bits on the wire
    nchunks = 1 if chunk is None else -(-n // chunk)
    assert p.payload_nbytes == (n * bits + 7) // 8 + 4 * nchunks


@pytest.mark.parametrize("bits, chunk", [(8, 1024), (4, 1000), (2, 1024), (4, None), (4, 999)])
def test_quantize_paths_agree(bits, chunk):
    if kernels.jit() is None:
        pytest.skip("numba is not installed")
    x = torch.randn(200_001, generator=torch.Generator().manual_seed(5))
    fast = Quantize(bits, chunk=chunk).compress(x)
    kernels.USE_NUMBA = False
    try:
        slow = Quantize(bits, chunk=chunk).compress(x)
        decoded_slow = Quantize(bits).decompress(fast)
    finally:
        kernels.USE_NUMBA = True
    assert torch.equal(fast.parts[1], slow.parts[1])      # the same scales, bit for bit
    assert torch.equal(fast.parts[0], slow.parts[0])      # and the same codes
    assert torch.equal(Quantize(bits).decompress(fast), decoded_slow)


def test_quantize_zero_chunk_and_reference_codes():
    x = torch.cat([torch.zeros(10), torch.tensor([1.0, -0.5, 0.25, -1.0])])
    q = Quantize(bits=8, chunk=10)
    out = q.decompress(q.compress(x))
    assert torch.equal(out[:10], torch.zeros(10))
    # round half up: -63.5 -> -63, 31.75 -> 32
    assert torch.allclose(out[10:], torch.tensor([1.0, -63 / 127, 32 / 127, -1.0]), atol=1e-6)


@pytest.mark.parametrize("comp", [Quantize(bits=4, stochastic=True, chunk=None), QSGD(levels=2, chunk=None),
                                  TernGrad()], ids=["int4-stochastic", "qsgd", "terngrad"])
def test_stochastic_quantizers_are_unbiased(comp):
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    trials = 4000
    mean = torch.zeros(64, dtype=torch.float64)
    for _ in range(trials):
        mean += comp.decompress(comp.compress(x)).double()
    mean /= trials
    # per-entry standard error is at most (quantization step)/(2 sqrt(trials))
    step = {"int4-stochastic": x.abs().max() / 7, "qsgd": x.norm() / 2, "terngrad": x.abs().max()}
    step = float(next(v for k, v in step.items() if k in comp.name or comp.name.startswith(k[:4])))
    assert float((mean - x.double()).abs().max()) < 5 * step / (2 * trials ** 0.5)


def test_round_to_nearest_is_biased_but_stochastic_is_not():
    x = torch.full((1000,), 0.3)
    x[0] = 1.0   # 0.3 sits between levels of a 2-bit grid
    det = Quantize(bits=2, chunk=None).decompress(Quantize(bits=2, chunk=None).compress(x))
    assert float(det[1:].mean()) == 0.0                       # always rounds down: bias 0.3
    sq = Quantize(bits=2, chunk=None, stochastic=True)
    m = torch.stack([sq.decompress(sq.compress(x)) for _ in range(200)]).mean()
    assert abs(float(m) - float(x.mean())) < 0.02


def test_qsgd_variance_bound():
    n, s = 1000, 4
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    q = QSGD(levels=s, chunk=None)
    var = np.mean([float((q.decompress(q.compress(x)) - x).pow(2).sum()) for _ in range(300)])
    bound = min(n / s ** 2, n ** 0.5 / s) * float(x.pow(2).sum())
    assert var <= bound
    assert var > 0.01 * bound                                # and it is not trivially zero


def test_sign_is_one_bit_and_keeps_l1_norm():
    x = torch.randn(10_001, generator=torch.Generator().manual_seed(2))
    for path in ("numba", "torch"):
        if path == "torch":
            kernels.USE_NUMBA, saved = False, kernels.USE_NUMBA
        try:
            p = Sign().compress(x)
            out = Sign().decompress(p)
        finally:
            if path == "torch":
                kernels.USE_NUMBA = saved
        scale = x.abs().mean()
        assert torch.allclose(out, torch.where(x < 0, -scale, scale), atol=1e-6)
        assert p.payload_nbytes == (10_001 + 7) // 8 + 4


def test_sign_large_tensor_both_paths_agree():
    x = torch.randn(300_003, generator=torch.Generator().manual_seed(4))
    fast = Sign().compress(x)
    saved, kernels.USE_NUMBA = kernels.USE_NUMBA, False
    try:
        slow = Sign().compress(x)
        slow_out = Sign().decompress(fast)
    finally:
        kernels.USE_NUMBA = saved
    assert torch.equal(fast.parts[0], slow.parts[0])
    assert torch.allclose(Sign().decompress(fast), slow_out)


def test_cast_matches_torch_and_refuses_fp16_overflow():
    x = torch.randn(1000, dtype=torch.float64)
    for dt in (torch.float16, torch.bfloat16):
        out = Cast(dt).decompress(Cast(dt).compress(x))
        assert torch.equal(out, x.to(dt).to(torch.float64))
    with pytest.raises(ValueError, match="bfloat16"):
        Cast(torch.float16).compress(torch.tensor([1e6]))
    assert torch.isfinite(Cast(torch.bfloat16).decompress(Cast(torch.bfloat16).compress(torch.tensor([1e6])))).all()


def test_powersgd_is_a_rank_r_projection():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(60, 40, generator=g, dtype=torch.float64)
    ps = PowerSGD(rank=3, warm_start=False, seed=11)
    q0 = torch.randn(40, 3, generator=torch.Generator().manual_seed(11)).double()
    u = orthonormalize(m @ q0)
    expect = u @ u.t() @ m
    got = ps.decompress(ps.compress(m.float())).double()
    assert torch.allclose(got, expect, atol=1e-4)


def test_powersgd_warm_start_converges_to_truncated_svd():
    g = torch.Generator().manual_seed(1)
    m = torch.randn(50, 30, generator=g) @ torch.diag(torch.linspace(5, 0.1, 30)) @ torch.randn(30, 30, generator=g)
    ps = PowerSGD(rank=2)
    for _ in range(40):
        approx = ps.decompress(ps.compress(m))
    u, s, vh = torch.linalg.svd(m)
    best = u[:, :2] @ torch.diag(s[:2]) @ vh[:2]
    assert float((approx - m).norm()) <= float((best - m).norm()) * 1.01


def test_powersgd_vectors_go_dense():
    x = torch.randn(100)
    p = PowerSGD(rank=4).compress(x)
    assert p.params[2] == 0 and torch.equal(PowerSGD().decompress(p), x)


def test_chain_equals_topk_then_quantize():
    x = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    chain = Chain(TopK(ratio=0.02), Quantize(bits=8, chunk=None))
    p = chain.compress(x)
    idx, vals = sparse_decode(TopK(ratio=0.02).compress(x))
    q = Quantize(bits=8, chunk=None)
    expect = torch.zeros(5000)
    expect[idx] = q.decompress(q.compress(vals))
    assert torch.equal(chain.decompress(p), expect)
    assert p.nbytes < TopK(ratio=0.02).compress(x).nbytes


@pytest.mark.parametrize("name", sorted(ZOO))
def test_aggregate_is_sum_of_decompressed(name):
    comp = ZOO[name]()
    packets = [comp.compress(make_input(name, seed=s)) for s in range(3)]
    expect = sum(comp.decompress(p) for p in packets)
    assert torch.allclose(comp.aggregate(packets), expect, atol=1e-5)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_decompress_into_out_and_keeps_device_dtype(name):
    comp = ZOO[name]()
    x = make_input(name, dtype=torch.float64)
    p = comp.compress(x)
    out = torch.empty(x.shape, dtype=torch.float64)
    res = comp.decompress(p, out=out)
    assert res.data_ptr() == out.data_ptr() and torch.equal(res, comp.decompress(p))
    with pytest.raises(ValueError, match="out has shape"):
        comp.decompress(p, out=torch.empty(3))


@pytest.mark.parametrize("make, msg", [
    (lambda: TopK(ratio=0.0), r"\(0, 1\]"),
    (lambda: TopK(ratio=1.5), r"\(0, 1\]"),
    (lambda: TopK(k=0), ">= 1"),
    (lambda: TopK(), "exactly one of ratio"),
    (lambda: TopK(0.1, k=3), "exactly one of ratio"),
    (lambda: Quantize(bits=3), "bits must be one of"),
    (lambda: Quantize(bits=8, chunk=0), "chunk must be >= 1"),
    (lambda: Cast(torch.int8), "float16 or torch.bfloat16"),
    (lambda: PowerSGD(rank=0), "rank must be >= 1"),
    (lambda: Chain(Quantize(), TopK(0.1)), "must sparsify"),
    (lambda: TopK(0.1, index="zip"), "index must be one of"),
])
def test_bad_settings_say_what_to_change(make, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        make()


@pytest.mark.parametrize("x, msg", [
    (torch.zeros(0), "empty"),
    (torch.arange(5), "dtype torch.int64"),
    ([1.0, 2.0], "torch.Tensor"),
    (torch.tensor([1.0, float("nan"), 2.0]), "non-finite.*flat index 1.*nonfinite='zero'"),
    (torch.tensor([float("inf")]), "non-finite"),
])
def test_bad_gradients_say_what_to_change(x, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        TopK(k=1).compress(x)


def test_k_larger_than_tensor():
    with pytest.raises(ValueError, match="k=11 is out of range for a tensor of 10 elements"):
        TopK(k=11).compress(torch.randn(10))


def test_nonfinite_zero_policy():
    x = torch.tensor([1.0, float("nan"), -5.0, float("inf")])
    p = TopK(k=2, nonfinite="zero").compress(x)
    assert TopK(k=2).decompress(p).tolist() == [1.0, 0.0, -5.0, 0.0]


def test_reprs_and_names():
    assert repr(TopK(0.01)) == "TopK(ratio=0.01)"
    assert TopK(0.01).name == "topk-1%" and Quantize(4).name == "int4"
    assert Chain(TopK(0.01), Quantize(8)).name == "topk-1%+int8"
    assert Identity().name == "dense"


def test_fork_gives_each_worker_its_own_random_stream():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    for comp in (Quantize(bits=2, stochastic=True), QSGD(levels=2), TernGrad(),
                 Chain(TopK(ratio=0.5), Quantize(bits=2, stochastic=True))):
        a, b, again = comp.fork(0), comp.fork(1), comp.fork(0)
        pa = a.compress(x)
        assert pa == again.compress(x)              # reproducible per rank
        assert pa != b.compress(x)                  # independent across ranks
    # workers must agree on RandomK's positions and PowerSGD's start
    r0, r1 = RandomK(ratio=0.1, seed=3).fork(0), RandomK(ratio=0.1, seed=3).fork(1)
    assert torch.equal(sparse_decode(r0.compress(x))[0], sparse_decode(r1.compress(x))[0])
    m = x.view(20, 50)
    assert PowerSGD(rank=2).fork(0).compress(m) == PowerSGD(rank=2).fork(1).compress(m)
    base = Quantize(bits=8)
    assert base.fork(3).compress(x) == base.compress(x)   # deterministic ones are unchanged
