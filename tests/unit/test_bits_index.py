"""Bit packing and index encodings against numpy and brute force."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from milktea import index
from milktea.bits import pack, packed_size, unpack


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [1, 3, 8, 9, 31, 1000, 4097])
def test_pack_roundtrip_and_size(bits, n):
    codes = torch.randint(0, 2 ** bits, (n,), dtype=torch.uint8)
    packed = pack(codes, bits)
    assert packed.numel() == packed_size(n, bits) == (n * bits + 7) // 8
    assert torch.equal(unpack(packed, bits, n), codes)


def test_one_bit_matches_numpy_little_endian():
    codes = torch.randint(0, 2, (1001,), dtype=torch.uint8)
    expect = np.packbits(codes.numpy(), bitorder="little")
    assert np.array_equal(pack(codes, 1).numpy(), expect)


def test_reference_bit_layout():
    # code j of a byte sits at bits [b*j, b*(j+1)): brute force over every layout
    for bits in (2, 4):
        per = 8 // bits
        codes = torch.randint(0, 2 ** bits, (per * 5,), dtype=torch.uint8)
        expect = [sum(int(codes[i * per + j]) << (bits * j) for j in range(per)) for i in range(5)]
        assert pack(codes, bits).tolist() == expect


def test_pack_unaligned_slice():
    base = torch.randint(0, 2, (33,), dtype=torch.uint8)
    assert torch.equal(unpack(pack(base[1:], 1), 1, 32), base[1:])


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match="bits must be one of"):
        pack(torch.zeros(4, dtype=torch.uint8), 3)
    with pytest.raises(TypeError, match="uint8"):
        pack(torch.zeros(4, dtype=torch.int32), 1)
    with pytest.raises(ValueError, match="cannot hold"):
        unpack(torch.zeros(1, dtype=torch.uint8), 4, 3)


@st.composite
def index_sets(draw):
    numel = draw(st.one_of(st.integers(1, 300), st.integers(300, 3_000_000)))
    k = draw(st.integers(1, min(numel, 400)))
    if draw(st.booleans()):   # clustered at the ends: very long gaps
        pool = list(range(min(k, numel)))
        idx = sorted(set(pool[: k // 2] + [numel - 1 - i for i in range(k - k // 2)]))
    else:
        idx = sorted(draw(st.sets(st.integers(0, numel - 1), min_size=1, max_size=k)))
    return torch.tensor(idx, dtype=torch.int64), numel


@settings(max_examples=150, deadline=None)
@given(index_sets())
def test_every_encoding_roundtrips_and_sizes_are_exact(case):
    idx, numel = case
    sizes = index.sizes(idx, numel)
    for enc in index.ENCODINGS:
        name, data = index.encode(idx, numel, enc)
        assert name == enc and data.dtype == torch.uint8
        assert data.numel() == sizes[enc]
        assert torch.equal(index.decode(enc, data, idx.numel(), numel), idx)
    auto, data = index.encode(idx, numel)
    assert data.numel() == min(sizes.values())


def test_delta8_escapes_brute_force():
    idx = torch.tensor([0, 254, 255, 255 + 256, 100_000])
    _, data = index.encode(idx, 200_000, "delta8")
    # gaps: 0, 253, 0, 255, 99488 -> the 255 gap needs one escape, 99488 = 390*255 + 38
    expect = [0, 253, 0, 255, 0] + [255] * 390 + [38]
    assert data.tolist() == expect


def test_varint_brute_force():
    idx = torch.tensor([127, 127 + 129, 127 + 129 + 20000])
    _, data = index.encode(idx, 10 ** 6, "varint")
    # gaps 127, 128, 19999 in LEB128
    assert data.tolist() == [127, 0x80, 0x01, 0x9F, 0x9C, 0x01]


@pytest.mark.parametrize("bad, msg", [
    (torch.tensor([3, 1]), "sorted and unique"),
    (torch.tensor([1, 1]), "sorted and unique"),
    (torch.tensor([-1, 2]), r"\[0, 10\)"),
    (torch.tensor([2, 10]), r"\[0, 10\)"),
    (torch.tensor([], dtype=torch.int64), "no indices"),
    (torch.tensor([1.0]), "int64"),
])
def test_index_validation(bad, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        index.encode(bad, 10)


def test_decode_detects_corruption():
    _, data = index.encode(torch.tensor([1, 5, 9]), 10, "delta8")
    with pytest.raises(ValueError, match="announces"):
        index.decode("delta8", data, 4, 10)
    with pytest.raises(ValueError, match="out of range"):
        index.decode("delta8", torch.tensor([20], dtype=torch.uint8), 1, 10)
