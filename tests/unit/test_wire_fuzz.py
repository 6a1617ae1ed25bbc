"""Hostile bytes: every codec's packets, mutated, either decode to what their bytes say
or raise ValueError; never another exception, never a read past the buffer."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import milktea
from milktea import Packet
from milktea.compressors import decode, decode_add, decode_mean
from milktea.compressors.cast import _BY_CODE
from milktea.compressors.codec import codec_ids
from milktea.packet import MAGIC, VERSION

from compressor_zoo import ZOO, make_input

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
CODECS = codec_ids()          # the library's codecs and any a test module registered
INTERESTING = [0, 1, 2, 3, 4, 7, 8, 9, 63, 127, 128, 255, 256, 1999, 2000, 2001, 65536,
               2**31 - 1, 2**31, 2**32, 2**40, 2**63 - 1]


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def header(codec_id, dtype_id, shape, params, lengths) -> bytes:
    out = bytearray(MAGIC) + bytes((VERSION, codec_id, dtype_id))
    for seq in (shape, params, lengths):
        out += varint(len(seq)) + b"".join(varint(v) for v in seq)
    return bytes(out)


_packets = {}


def valid_packet(name: str, dtype: torch.dtype) -> Packet:
    if (name, dtype) not in _packets:
        _packets[name, dtype] = ZOO[name]().compress(make_input(name, dtype=dtype))
    return _packets[name, dtype]


@st.composite
def mutated(draw):
    """(the valid packet, the mutated bytes)."""
    p = valid_packet(draw(st.sampled_from(sorted(ZOO))), draw(st.sampled_from(DTYPES)))
    raw = bytearray(p.to_bytes())
    head = len(p.header())
    kind = draw(st.sampled_from(["flip", "truncate", "extend", "byte", "field", "codec", "parts"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            # flips land in the header half the time: that is where the sizes are
            i = draw(st.integers(0, head - 1) | st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        raw = raw[:draw(st.integers(0, len(raw) - 1))]
    elif kind == "extend":
        raw += draw(st.binary(min_size=1, max_size=64))
    elif kind == "byte":
        raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    else:
        dtype_id = milktea.packet.DTYPES[p.dtype]
        shape, params = list(p.shape), list(p.params)
        lengths = [q.numel() for q in p.parts]
        codec_id = CODECS[p.codec]
        value = draw(st.sampled_from(INTERESTING) | st.integers(0, 2**63 - 1))
        if kind == "codec":
            codec_id = draw(st.sampled_from(sorted(CODECS.values())))
        elif kind == "parts":
            if draw(st.booleans()) or not lengths:
                lengths.append(0)
            else:
                lengths[draw(st.integers(0, len(lengths) - 1))] = value
        else:
            seq = draw(st.sampled_from([s for s in (shape, params) if s] or [shape]))
            if seq and draw(st.booleans()):
                seq[draw(st.integers(0, len(seq) - 1))] = value
            elif draw(st.booleans()) and seq:
                seq.pop()
            else:
                seq.append(value)
        raw = bytearray(header(codec_id, dtype_id, shape, params, lengths)) + raw[head:]
    return p, bytes(raw)


def float_views(packet: Packet):
    """Every way the packet's bytes (and an inner packet's) can be read as floats: as
    float32, as the packet's dtype, and as a cast packet's 16-bit dtype."""
    dtypes = [torch.float32, packet.dtype]
    if packet.codec == "cast" and packet.params and packet.params[0] in _BY_CODE:
        dtypes.append(_BY_CODE[packet.params[0]])
    for part in packet.parts:
        for dt in dtypes:
            size = torch.empty((), dtype=dt).element_size()
            if part.numel() and part.numel() % size == 0:
                # a product of two floats of this dtype overflows it from sqrt(max) on
                yield part.clone().view(dt).double() / (math.sqrt(torch.finfo(dt).max) / 16)
        try:
            yield from float_views(Packet.from_tensor(part))
        except (ValueError, TypeError):
            pass


def check_decodes_or_refuses(raw: bytes) -> None:
    try:
        packet = Packet.from_bytes(raw)
    except ValueError:
        return
    try:
        out = decode(packet)
    except ValueError:
        return
    assert out.shape == packet.shape and out.dtype == packet.dtype
    assert out.numel() <= 8 * len(raw) * 2**17          # nothing huge from a few bytes
    if not bool(torch.isfinite(out).all()):
        # non-finite values must come from the bytes: a non-finite or huge float in them
        assert any(bool((~torch.isfinite(v) | (v.abs() > 1)).any()) for v in float_views(packet))
    # the same packet decodes to the same bits into `out`, and added into zeros
    again = torch.full_like(out, 7.0)
    decode(packet, out=again)
    added = decode_add(packet, torch.zeros_like(out))
    same = lambda a, b: torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))   # noqa: E731
    assert same(out, again) and same(out, added)
    # the mean an all-gather takes (sparse merge, or the last packet added and divided in
    # one pass), onto anything or onto zeros: decode, add, divide, whatever the bytes
    want = decode_add(packet, out.clone()).div_(2)
    assert same(decode_mean([packet, packet], torch.full_like(out, 7.0)), want)
    assert same(decode_mean([packet, packet], torch.zeros_like(out), zeroed=True), want)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated())
def test_mutated_packets_decode_or_raise_value_error(case):
    _, raw = case
    check_decodes_or_refuses(raw)


@settings(max_examples=300, deadline=None)
@given(tail=st.binary(max_size=120), codec=st.sampled_from(sorted(CODECS.values())),
       dtype=st.integers(0, 4), prefix=st.booleans())
def test_random_bytes(tail, codec, dtype, prefix):
    raw = (MAGIC + bytes((VERSION, codec, dtype)) + tail) if prefix else tail
    if not raw:
        with pytest.raises(ValueError, match="empty"):
            Packet.from_bytes(raw)
        return
    check_decodes_or_refuses(raw)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_truncation_and_every_header_byte(name, compiled, monkeypatch):
    """Exhaustive on one packet per codec: each shorter prefix, each header byte set to 0 and 255;
    compiled: through the numba loops even at this size (the decoders, adds and means)."""
    from milktea import kernels
    if compiled and kernels.jit() is None:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(kernels, "NUMBA_MIN_NUMEL", 0 if compiled else 1 << 62)
    p = valid_packet(name, torch.float32)
    raw = p.to_bytes()
    for n in range(len(raw)):
        with pytest.raises(ValueError):
            decode(Packet.from_bytes(raw[:n]))
    for i in range(len(p.header())):
        for v in (0, 255, raw[i] ^ 0x80):
            check_decodes_or_refuses(raw[:i] + bytes([v]) + raw[i + 1:])


@pytest.mark.parametrize("packet, msg", [
    (lambda: Packet("sign", (70_000,), torch.float32, (), (torch.zeros(1, dtype=torch.uint8),
                                                           torch.zeros(4, dtype=torch.uint8))), "cannot stand for"),
    (lambda: Packet("quant", (100,), torch.float32, (0, 100, 0), (torch.zeros(100, dtype=torch.uint8),
                                                                  torch.zeros(4, dtype=torch.uint8))), "bits must be"),
    (lambda: Packet("quant", (100,), torch.float32, (8, 0, 0), (torch.zeros(100, dtype=torch.uint8),
                                                                torch.zeros(4, dtype=torch.uint8))), "chunk >= 1"),
    (lambda: Packet("dense", (10**9,), torch.float32, (), (torch.zeros(4, dtype=torch.uint8),)), "cannot stand for"),
    (lambda: Packet("qsgd", (100,), torch.float32, (0, 2, 100), (torch.zeros(25, dtype=torch.uint8),
                                                                 torch.zeros(4, dtype=torch.uint8))), "levels=0"),
    (lambda: Packet("randomk", (100,), torch.float32, (10, 3), (torch.zeros(8, dtype=torch.uint8),)), "10 torch.float32 values"),
    (lambda: Packet("topk", (100,), torch.float32, (1, 9), (torch.zeros(4, dtype=torch.uint8),
                                                            torch.zeros(4, dtype=torch.uint8))), "encoding id 9"),
    (lambda: Packet("topk", (100,), torch.float32, (2, 0), (torch.tensor([-1, 3], dtype=torch.int32).view(torch.uint8),
                                                            torch.zeros(8, dtype=torch.uint8))), "non-negative, sorted"),
    (lambda: Packet("topk", (100,), torch.float32, (2, 0), (torch.tensor([3, 3], dtype=torch.int32).view(torch.uint8),
                                                            torch.zeros(8, dtype=torch.uint8))), "sorted and unique"),
    (lambda: Packet("topk", (100,), torch.float32, (1, 2), (torch.tensor([0xFF] * 9 + [1], dtype=torch.uint8),
                                                            torch.zeros(4, dtype=torch.uint8))), "varint"),
    (lambda: Packet("topk", (100,), torch.float32, (2, 2), (torch.tensor([0xFF, 0x7F, 1], dtype=torch.uint8),
                                                            torch.zeros(8, dtype=torch.uint8))), "gap of 16383"),
    (lambda: Packet("chain", (100,), torch.float32, (77, 1), (torch.zeros(4, dtype=torch.uint8),)), "first stage"),
    (lambda: Packet("cast", (2,), torch.float32, (9,), (torch.zeros(4, dtype=torch.uint8),)), "16-bit dtype code 9"),
    (lambda: Packet("powersgd", (6,), torch.float32, (2, 3, 3), (torch.zeros(24, dtype=torch.uint8),
                                                                 torch.zeros(36, dtype=torch.uint8))), "rank"),
])
def test_known_corruptions_say_what_is_wrong(packet, msg):
    with pytest.raises(ValueError, match=msg):
        decode(packet())


def test_header_cannot_declare_a_huge_tensor():
    # 21 bytes that used to make the receiver allocate 4 GB
    raw = header(CODECS["dense"], 0, [10**9], [], [4]) + bytes(4)
    with pytest.raises(ValueError, match="cannot stand for"):
        Packet.from_bytes(raw)
    raw = header(CODECS["topk"], 0, [2**33], [1, 0], [4, 4]) + bytes(8)
    with pytest.raises(ValueError, match="more than"):
        Packet.from_bytes(raw)


def test_factors_whose_product_overflows_are_what_the_bytes_say():
    # float32 factors of a float64 tensor: finite, far below float64's range, yet their
    # product overflows float32 (a case the random search once found)
    p, q = torch.full((40, 2), 3e38), torch.full((50, 2), 2.0)
    packet = Packet("powersgd", (40, 50), torch.float64, (40, 50, 2),
                    (p.view(torch.uint8).reshape(-1), q.view(torch.uint8).reshape(-1)))
    assert not bool(torch.isfinite(decode(packet)).all())
    check_decodes_or_refuses(packet.to_bytes())
