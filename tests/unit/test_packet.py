"""The wire format: exact byte counts, exact round trips, clear errors on garbage."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import milktea
from milktea import Packet

from compressor_zoo import ZOO, make_input


@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_nbytes_is_serialized_length_and_roundtrip(name, dtype):
    comp = ZOO[name]()
    x = make_input(name, dtype=dtype)
    p = comp.compress(x)
    raw = p.to_bytes()
    assert p.nbytes == len(raw)
    q = Packet.from_bytes(raw)
    assert q == p and q.shape == p.shape and q.dtype == dtype and q.params == p.params
    a, b = comp.decompress(p), comp.decompress(q)
    assert a.dtype == dtype and a.shape == x.shape
    assert torch.equal(a, b)
    assert milktea.decode(q).equal(a)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(ZOO)), n=st.integers(1, 3000), seed=st.integers(0, 10 ** 6),
       zeros=st.booleans())
def test_roundtrip_any_size(name, n, seed, zeros):
    comp = ZOO[name]()
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n) if zeros else torch.randn(n, generator=g)
    if name.startswith("powersgd") and n % 2 == 0:
        x = x.view(2, n // 2)
    p = comp.compress(x)
    raw = p.to_bytes()
    assert p.nbytes == len(raw)
    assert torch.equal(comp.decompress(Packet.from_bytes(raw)), comp.decompress(p))


def test_from_tensor_ignores_trailing_padding():
    p = milktea.TopK(k=3).compress(torch.randn(50))
    padded = torch.cat([p.to_tensor(), torch.zeros(17, dtype=torch.uint8)])
    assert Packet.from_tensor(padded) == p


def test_header_is_small_and_counted():
    p = milktea.Identity().compress(torch.zeros(1000))
    assert p.nbytes == 4000 + p.header_nbytes and p.header_nbytes < 16
    assert p.ratio == pytest.approx(4000 / p.nbytes)


@pytest.mark.parametrize("raw, msg", [
    (b"", "empty"),
    (b"XX\x01\x00\x00\x00\x00\x00", "bad magic"),
    (b"MT\x09\x00\x00\x00\x00\x00", "version"),
    # 63: reserved for the library and unused, so no codec registered elsewhere in this
    # process can own it (a module's doctest registers id 99)
    (b"MT\x01\x3f\x00\x00\x00\x00", "unknown codec"),
    (b"MT\x01\x00\x00\x01", "truncated"),
])
def test_garbage_is_rejected_clearly(raw, msg):
    with pytest.raises(ValueError, match=msg):
        Packet.from_bytes(raw)


def test_truncated_payload():
    raw = milktea.Identity().compress(torch.ones(10)).to_bytes()
    with pytest.raises(ValueError, match="truncated packet"):
        Packet.from_bytes(raw[:-1])


def test_repr_tells_the_story():
    r = repr(milktea.TopK(ratio=0.1).compress(torch.randn(1000)))
    assert "topk" in r and "B on the wire" in r and "x smaller" in r


# -- a compressor defined outside the library registers its own codec ------------------
from milktea.compressors import Compressor, decode_add, get_codec, register_codec  # noqa: E402
from milktea.compressors.wire import expect_layout, expect_nbytes, from_bytes, output, to_bytes  # noqa: E402
from milktea.compressors.codec import lookup  # noqa: E402


class Halves(Compressor):
    """Sends x / 2 as float16 with one exponent shift (a toy, but a real codec)."""
    codec = "test-halves"

    def _compress(self, t):
        return Packet(self.codec, tuple(t.shape), t.dtype, (1,), (to_bytes((t / 2).to(torch.float16)),))


def _decode_halves(packet, out=None):
    expect_layout(packet, 1, 1)
    expect_nbytes(packet, 0, 2 * packet.numel, "float16 halves")
    res = output(packet, out)
    res.view(-1).copy_(from_bytes(packet.parts[0], torch.float16).to(packet.dtype) * 2 ** packet.params[0])
    return res


register_codec("test-halves", 200, _decode_halves, expansion=0.5)


def test_a_users_compressor_registers_its_codec():
    x = torch.tensor([1.0, -3.0, 0.5])
    p = Halves().compress(x)
    q = Packet.from_bytes(p.to_bytes())
    assert q.codec == "test-halves" and lookup("test-halves").id == 200
    assert torch.equal(milktea.decode(q), x) and torch.equal(Halves().decompress(q), x)
    assert torch.equal(decode_add(q, torch.ones(3), alpha=-1.0), 1 - x)     # generic path
    ef = milktea.ErrorFeedback(Halves())
    assert torch.equal(ef.decompress(ef.compress(x)), x) and float(ef.residual.abs().max()) == 0
    # its packets are checked like the library's
    with pytest.raises(ValueError, match="float16 halves"):
        milktea.decode(Packet("test-halves", (2,), torch.float32, (1,), (torch.zeros(6, dtype=torch.uint8),)))


def test_registry_refuses_clashes_and_names_known_codecs():
    with pytest.raises(ValueError, match="taken by 'test-halves'"):
        register_codec("mine", lookup("test-halves").id, _decode_halves, expansion=1)
    with pytest.raises(ValueError, match="already has id"):
        register_codec("test-halves", 202, _decode_halves, expansion=1)
    with pytest.raises(ValueError, match="one of the library's codecs"):
        register_codec("topk", 201, _decode_halves, expansion=1)
    with pytest.raises(ValueError, match=r"\[0, 255\]"):
        register_codec("mine", 256, _decode_halves, expansion=1)
    with pytest.raises(ValueError, match="unknown codec 'zip'; known: .*'topk'"):
        Packet("zip", (1,), torch.float32)
    with pytest.raises(ValueError, match="unknown codec id 250"):
        Packet.from_bytes(b"MT\x01\xfa\x00\x01\x01\x00\x00")
    assert get_codec("sign").expansion == 8


@pytest.mark.parametrize("codec", ["int8", "sign", "topk"])
def test_a_lent_buffer_takes_the_first_part_where_a_codec_makes_one(codec):
    """`encode(..., into=buf)`: int8 codes and sign bits are made in the buffer the DDP hook
    lends (its send buffer), from its start; the packet is the same bytes either way."""
    from milktea import Quantize, Sign, TopK
    c = {"int8": Quantize(8), "sign": Sign(), "topk": TopK(0.01)}[codec]
    x = torch.randn(1 << 17)
    buf = torch.zeros(1 << 19, dtype=torch.uint8)
    p = c.encode(x.unsqueeze(0), into=buf[256:])[0][0]
    assert (p.parts[0].data_ptr() == buf.data_ptr() + 256) == (codec != "topk")    # codes, bits: in place
    assert p.to_bytes() == c.compress(x).to_bytes()


def test_read_takes_headers_and_parts_from_different_places():
    """The DDP hook lays a rank's packets out as their parts, then their headers (which reach
    the host together): `read` parses each header once, its parts views of the payload."""
    from milktea import Sign, TopK
    from milktea.compressors.packet import read
    packets = [TopK(0.1).compress(torch.randn(100)), Sign().compress(torch.randn(50))]
    heads = b"".join(p.header() for p in packets)
    body = torch.cat([q for p in packets for q in p.parts])
    at = off = 0
    for p in packets:
        q, at, off = read(heads, at, body, off)
        assert q == p and q.nbytes == p.nbytes and q.parts[0].data_ptr() >= body.data_ptr()
    assert at == len(heads) and off == body.numel()
    with pytest.raises(ValueError, match="truncated packet"):
        read(heads, 0, body[:10], 0)