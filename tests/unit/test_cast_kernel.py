"""Cast's compiled loop gives the bits of torch's own conversion, on every exponent, and
refuses a float16 overflow; large buffers ask for huge pages without changing a value."""
import pytest
import torch

from milktea import Cast, buffers, kernels


def _every_exponent() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    bits = torch.cat([torch.randint(0, 1 << 31, (1 << 22,), generator=g, dtype=torch.int64),
                      torch.arange(0x33000000 - 4000, 0x33000000 + 4000),    # around float16's smallest subnormal
                      torch.arange(0x387FF000, 0x38801000),                  # float16's subnormal / normal edge
                      torch.arange(0x477FE000, 0x47800010),                  # float16's largest values
                      torch.arange(0, 70_000)])                              # float32's subnormals
    x = torch.cat([bits, bits | (1 << 31)]).to(torch.int32).view(torch.float32)
    return x[torch.isfinite(x)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_compiled_cast_gives_torchs_bits(dtype, monkeypatch):
    if kernels.jit() is None:
        pytest.skip("numba is not installed")
    x = _every_exponent()
    if dtype == torch.float16:
        x = x[x.abs() < 65520]                  # beyond, float16 overflows (refused below)
    got = Cast(dtype).compress(x).parts[0]
    assert torch.equal(got, x.to(dtype).view(torch.uint8).reshape(-1))


@pytest.mark.parametrize("path", ["numba", "torch"])
def test_a_float16_overflow_is_refused(path, monkeypatch):
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    x = torch.zeros(200_000)
    x[123_456] = 65520.0                       # rounds to inf in float16
    with pytest.raises(ValueError, match="exceeds float16's range"):
        Cast(torch.float16).compress(x)
    x[123_456] = 65519.0                       # rounds to 65504: fine
    assert float(Cast(torch.float16).decompress(Cast(torch.float16).compress(x))[123_456]) == 65504.0


def test_huge_page_buffers_are_ordinary_tensors():
    t = buffers.empty((3, 1_000_000), torch.float32)
    assert t.shape == (3, 1_000_000) and t.dtype == torch.float32 and t.is_contiguous()
    t.fill_(2.5)
    assert float(t.sum()) == 7.5e6
    assert buffers.empty(5, torch.uint8).numel() == 5           # small: a plain torch.empty
