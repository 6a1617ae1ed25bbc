"""Stochastic rounding's random numbers and codes: the compiled loops and their torch twins
give the same bits; the hash is SplitMix64's; norms are right; corrupt codes are refused."""
import numpy as np
import pytest
import torch

from milktea import QSGD, Quantize, TernGrad, kernels, stochastic
from milktea.bits import unpack
from milktea.packet import Packet

from test_numerics import _both_paths, _gradients


def _splitmix_reference(key: int, start: int, n: int) -> np.ndarray:
    """Entry j's uniform: 24 bits of SplitMix64's output for the state key + (j//2 + 1) *
    golden (the top ones for even j, bits 8-31 for odd j), in numpy's wrapping uint64."""
    j = np.arange(start, start + n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (j // np.uint64(2) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    shift = np.where(j % np.uint64(2) == 0, np.uint64(40), np.uint64(8))
    return ((z >> shift) & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0 ** -24)


@pytest.mark.parametrize("key, start", [(0, 0), (123456789, 0), (5, 7), ((1 << 62) - 1, 10 ** 12 + 1)])
def test_torch_uniforms_are_splitmix64(key, start):
    # int64 tensor products must wrap as uint64 ones do; a build where they did not fails here
    assert np.array_equal(stochastic.uniforms(key, 5000, start).numpy(), _splitmix_reference(key, start, 5000))


def test_uniforms_look_uniform():
    u = stochastic.uniforms(key=99, n=1 << 20)
    assert 0 <= float(u.min()) and float(u.max()) < 1
    hist = torch.histc(u, bins=16, min=0, max=1) / u.numel()
    assert float((hist - 1 / 16).abs().max()) < 0.002
    lag = float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])
    assert abs(lag) < 0.005                                    # neighbours do not move together


CASES = {
    "qsgd-4": lambda chunk: QSGD(levels=4, chunk=chunk),
    "qsgd-100": lambda chunk: QSGD(levels=100, chunk=chunk),
    "terngrad": lambda chunk: TernGrad(chunk=chunk),
    "int4-stochastic": lambda chunk: Quantize(bits=4, chunk=chunk, stochastic=True),
    "int2-stochastic": lambda chunk: Quantize(bits=2, chunk=chunk, stochastic=True),
    "int8-stochastic": lambda chunk: Quantize(bits=8, chunk=chunk, stochastic=True),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("chunk", [512, 1000, 40_000, None])       # None and 40_000: pieces of one chunk
@pytest.mark.parametrize("which", ["digits", "digits*1e-30", "edge"])
def test_stochastic_paths_are_bit_identical(name, chunk, which, monkeypatch):
    x = _gradients()[which]
    fast, slow = _both_paths(lambda: CASES[name](chunk).compress(x), monkeypatch)
    assert fast.params == slow.params
    assert torch.equal(fast.parts[0], slow.parts[0])            # codes
    assert torch.equal(fast.parts[1], slow.parts[1])            # norms or scales, as bytes
    comp = CASES[name](chunk)
    a, b = _both_paths(lambda: comp.decompress(fast), monkeypatch)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    base = torch.randn(x.numel(), generator=torch.Generator().manual_seed(3))
    for alpha in (1.0, -1.0):
        c, d = _both_paths(lambda a=alpha: comp.decompress_add(fast, base.clone(), a), monkeypatch)
        assert torch.equal(c, d)
    m1, m2 = _both_paths(lambda: comp.decode_mean([fast, slow], torch.empty(x.numel())), monkeypatch)
    assert torch.equal(m1, m2)


@pytest.mark.parametrize("chunk", [512, None])
def test_qsgd_norm_is_the_two_norm(chunk):
    x = _gradients()["digits"]
    q = QSGD(levels=4, chunk=chunk)
    norms = q.compress(x).parts[1].clone().view(torch.float32)
    size = chunk or x.numel()
    rows = torch.nn.functional.pad(x, (0, (-x.numel()) % size)).view(-1, size).double()
    exact = rows.norm(dim=1).float()
    assert torch.allclose(norms, exact, rtol=1e-6, atol=0)
    assert bool((norms >= rows.abs().amax(1).float()).all())   # levels never exceed the norm


def test_one_dominant_entry_still_gets_a_norm_at_least_its_size():
    x = torch.full((100_000,), 1e-30)
    x[17] = -3.0
    p = QSGD(levels=4, chunk=None).compress(x)
    assert float(p.parts[1].clone().view(torch.float32)[0]) >= 3.0


@pytest.mark.parametrize("path", ["numba", "torch"])
@pytest.mark.parametrize("codec, levels", [("qsgd", 4), ("terngrad", 1)])
def test_a_code_above_two_levels_is_refused_and_nothing_is_written(path, codec, levels, monkeypatch):
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    n = 100_000
    comp = QSGD(levels=4) if codec == "qsgd" else TernGrad()
    good = comp.compress(torch.randn(n))
    codes = good.parts[0].clone()
    codes[n // 8] = 0xFF                                      # codes 15 or 3: above 2 * levels
    bad = Packet(codec, good.shape, good.dtype, good.params, (codes, good.parts[1]))
    assert int(unpack(codes, good.params[1], n).max()) > 2 * levels
    out = torch.ones(n)
    with pytest.raises(ValueError, match=f"malformed {codec} packet: a code is"):
        comp.decompress(bad, out=out)
    if path == "numba":                                        # checked before a single write
        assert bool((out == 1).all())
    acc = torch.ones(n)
    with pytest.raises(ValueError, match="above 2 \\* levels"):
        comp.decompress_add(bad, acc)


def test_a_resumed_compressor_draws_what_the_uninterrupted_one_does():
    x = torch.randn(200_000)
    a = QSGD(levels=4)
    a.compress(x)
    b = QSGD(levels=4)
    b.load_state_dict(a.state_dict())
    assert a.compress(x).to_bytes() == b.compress(x).to_bytes()
    assert a.compress(x).to_bytes() != QSGD(levels=4).compress(x).to_bytes()   # each call draws anew


# -- RandomK's positions: hashed draws, duplicates skipped --------------------------------
@pytest.mark.parametrize("n, k", [(2_000_000, 20_000), (3_000_000, 700_000), (1 << 21, 1)])
def test_random_positions_are_the_same_on_both_paths(n, k, monkeypatch):
    monkeypatch.setattr(kernels, "NUMBA_MIN_NUMEL", 0)
    fast = stochastic.random_positions(n, k, key=12345)
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    slow = stochastic.random_positions(n, k, key=12345)
    assert torch.equal(fast, slow)
    assert fast.numel() == k and bool((fast[1:] > fast[:-1]).all())   # k distinct, sorted
    assert 0 <= int(fast[0]) and int(fast[-1]) < n


def test_random_positions_include_every_position_equally_often():
    n, k, runs = 2_000_000, 100_000, 200
    hits = torch.zeros(n)
    for key in range(runs):
        hits[stochastic.random_positions(n, k, key)] += 1
    p = k / n
    assert float(hits.mean()) == pytest.approx(runs * p)
    assert float(hits.std()) == pytest.approx((runs * p * (1 - p)) ** 0.5, rel=0.02)   # binomial spread
    first, last = hits[: n // 2].mean(), hits[n // 2:].mean()                            # no drift along n
    assert abs(float(first - last)) < 0.02 * runs * p


def test_randomk_packets_decode_to_the_same_positions_on_both_paths(monkeypatch):
    from milktea import RandomK
    x = torch.randn(2_000_000)
    p = RandomK(0.01, seed=3).compress(x)
    a = RandomK(0.01).decompress(p)
    monkeypatch.setattr(kernels, "USE_NUMBA", False)
    b = RandomK(0.01).decompress(p)
    assert torch.equal(a, b)
    kept = a != 0
    assert int(kept.sum()) == 20_000 and torch.equal(a[kept], x[kept])


def test_a_chunks_max_read_from_its_bits_is_that_float():
    """The compiled max works on a float's bits (an integer max vectorizes); as_float turns
    them back by arithmetic: every kind of non-negative float32 comes back bit for bit."""
    if kernels.jit() is None:
        pytest.skip("numba is not installed")
    from milktea import numba_bits as nb
    edges = np.array([0, 1, 0x7FFFFF, 0x800000, 0x3F800000, 0x7F7FFFFF, 0x7F800000], dtype=np.int32)
    bits = np.concatenate([edges, np.random.default_rng(0).integers(0, 0x7F800000, 10_000, dtype=np.int32)])
    got = np.array([nb.as_float(int(b)) for b in bits[:50]] +
                   [nb.as_float(int(b)) for b in bits[50::97]], dtype=np.float32)
    want = np.concatenate([bits[:50], bits[50::97]]).view(np.float32)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
