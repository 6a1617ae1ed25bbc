"""decompress_add(packet, out, alpha) == out + alpha * decompress(packet), without a
full-size temporary for the sparse, quantized, sign and dense codecs."""

import pytest
import torch

from milktea import Quantize, TopK
from milktea.kernels import TORCH_PIECE as PIECE

from compressor_zoo import ZOO, make_input


def reference(comp, packet, out, alpha):
    return out + alpha * comp.decompress(packet).to(out.dtype)


@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_matches_decode_then_add(name, dtype):
    comp = ZOO[name]()
    x = make_input(name, dtype=dtype)
    p = comp.compress(x)
    g = torch.Generator().manual_seed(1)
    for out_dtype in {dtype, torch.float32, torch.float64}:
        base = torch.randn(x.shape, generator=g).to(out_dtype)
        for alpha in (1.0, -1.0, 0.375):
            got = comp.decompress_add(p, base.clone(), alpha=alpha)
            want = reference(comp, p, base, alpha)
            assert got.dtype == out_dtype
            if alpha in (1.0, -1.0):   # alpha * v is exact: the same additions, bit for bit
                assert torch.equal(got, want), (out_dtype, alpha)
            else:   # one rounding instead of two: within an ulp of out's dtype
                eps = torch.finfo(out_dtype).eps
                assert torch.allclose(got.double(), want.double(), rtol=2 * eps,
                                      atol=2 * eps * float(want.abs().max()))


@pytest.mark.parametrize("name", ["int4", "sign", "topk+int8", "qsgd", "identity", "fp16"])
def test_many_pieces(name):
    # more than one piece, not a multiple of the piece size nor of the chunk
    n = 2 * PIECE + 1001
    x = torch.randn(n, generator=torch.Generator().manual_seed(2))
    comp = ZOO[name]()
    p = comp.compress(x)
    base = torch.randn(n, generator=torch.Generator().manual_seed(3))
    assert torch.equal(comp.decompress_add(p, base.clone(), alpha=-1.0), reference(comp, p, base, -1.0))


@pytest.mark.parametrize("bits,chunk", [(8, 1000), (4, 999), (2, 1024), (8, 1 << 21)])
def test_quantized_pieces_start_on_chunk_and_byte_boundaries(bits, chunk):
    # pieces decode with the whole-tensor kernel on slices of codes and scales: a chunk that
    # does not divide the piece, an odd one (pieces must also start on a byte), and one longer
    # than any piece (decoded entry by entry instead) all give decode-then-add's bits
    n = 2 * PIECE + 1001
    x = torch.randn(n, generator=torch.Generator().manual_seed(4))
    comp = Quantize(bits=bits, chunk=chunk)
    p = comp.compress(x)
    base = torch.randn(n, generator=torch.Generator().manual_seed(5))
    assert torch.equal(comp.decompress_add(p, base.clone(), alpha=1.0), reference(comp, p, base, 1.0))


def bits_of(t):
    return t.view({torch.float64: torch.int64, torch.float32: torch.int32}.get(t.dtype, torch.int16))


@pytest.mark.parametrize("numba", [True, False])
@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_mean_matches_decode_add_divide(name, dtype, numba, monkeypatch):
    # decode_mean may take a shortcut (sparse packets: one merge of the sorted index
    # lists, dividing only listed positions); whatever it does, its bits are those of
    # packet 0 decoded, the others added in order, then the whole divided by the count
    from milktea import kernels
    monkeypatch.setattr(kernels, "USE_NUMBA", numba)
    monkeypatch.setattr(kernels, "NUMBA_MIN_NUMEL", 0)     # the compiled loops even at this size
    comp = ZOO[name]()
    x = make_input(name, dtype=dtype)
    x[0, :3] = -0.0           # a negative zero Top-K keeps only where k passes the nonzeros
    for count in (1, 2, 3, 5):
        # overlapping supports: each worker's gradient is the last one's, partly redrawn
        packets = []
        for r in range(count):
            x = x.clone()
            x[r % x.shape[0]] = make_input(name, dtype=dtype, seed=r + 1)[r % x.shape[0]]
            packets.append(comp.compress(x))
        want = comp.decompress(packets[0]).clone()
        for p in packets[1:]:
            comp.decompress_add(p, want)
        want.div_(count)
        got = comp.decode_mean(packets, out=torch.full(x.shape, float("nan"), dtype=dtype))
        assert torch.equal(bits_of(got), bits_of(want)), (name, count)


@pytest.mark.parametrize("numba", [True, False])
def test_mean_keeps_the_sign_of_a_zero_as_decode_then_add(numba, monkeypatch):
    # a -0.0 that packet 0 sends stays -0.0 (decode puts it in place); sent by a later
    # packet, it is added to a zero and becomes +0.0: what decode-then-add gives
    from milktea import kernels
    monkeypatch.setattr(kernels, "USE_NUMBA", numba)
    monkeypatch.setattr(kernels, "NUMBA_MIN_NUMEL", 0)
    comp = TopK(k=2)
    a = comp.compress(torch.tensor([5.0, -0.0, 0.0, 0.0]))      # keeps 5 and the -0.0
    b = comp.compress(torch.tensor([0.0, 0.0, 9.0, 8.0]))
    for packets, sign in (([a, b], "-0.0"), ([b, a], "0.0")):
        got = comp.decode_mean(packets, out=torch.empty(4))
        assert got.tolist()[::2] == [2.5, 4.5] and str(float(got[1])) == sign


def test_checks_out():
    comp = ZOO["topk"]()
    p = comp.compress(torch.randn(100))
    with pytest.raises(ValueError, match="out has shape"):
        comp.decompress_add(p, torch.zeros(99))
    with pytest.raises(ValueError, match="float dtype"):
        comp.decompress_add(p, torch.zeros(100, dtype=torch.int64))
    with pytest.raises(ValueError, match="contiguous"):
        comp.decompress_add(p, torch.zeros(100, 2)[:, 0])
    with pytest.raises(TypeError, match="alpha"):
        comp.decompress_add(p, torch.zeros(100), alpha="1")


# -- peak memory, measured as the process's high-water RSS in a fresh interpreter ------
