"""A library codec is one record, in its compressor's file, with a wire id fixed forever;
the records sit in `milktea.compressors`, which loads every library codec before anyone can
register one or read a packet.

The bug this guards against: registering a codec of one's own with id 3 before the
library's compressor modules had loaded made `import milktea.compressors` (and with it
TopK and everything else) fail with "codec id 3 is taken".
"""
import sys

import pytest
import torch

import milktea
import milktea.compressors
import milktea.packet

# a Top-K packet's bytes, made before the test below takes the library away
RAW = milktea.TopK(k=1).compress(torch.tensor([0.0, 2.0, -1.0])).to_bytes()


def _ours(name: str) -> bool:
    return name == "milktea.packet" or name == "milktea.compressors" or name.startswith("milktea.compressors.")


@pytest.fixture
def fresh_interpreter():
    """milktea.packet and milktea.compressors unloaded, as in a new interpreter that has
    not imported them yet; the originals are put back afterwards."""
    saved = {k: m for k, m in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    try:
        yield
    finally:
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
        for attr in ("packet", "compressors"):       # the package's bindings of its submodules
            setattr(milktea, attr, saved[f"milktea.{attr}"])


#: the wire format's ids: packets from before decode the same, so these never change
WIRE_IDS = {"dense": 0, "topk": 1, "randomk": 2, "quant": 3, "qsgd": 4, "terngrad": 5, "sign": 6, "cast": 7,
            "powersgd": 8, "chain": 9}


def test_reading_a_packet_loads_the_library_codecs_and_a_user_id_below_64_is_refused(fresh_interpreter):
    import milktea.packet as packet            # the wire format's short name: it loads the codecs
    p = packet.Packet.from_bytes(RAW)
    assert p.codec == "topk" and p.shape == (3,)
    from milktea.compressors import TopK, decode, register_codec    # what used to fail
    with pytest.raises(ValueError, match=r"ids 0 to 63 are the library's \(3 is 'quant'\); give 'mine' an id "
                                         r"from 64 to 255"):
        register_codec("mine", 3, lambda packet, out=None: None, expansion=1.0)
    assert torch.equal(decode(p), torch.tensor([0.0, 2.0, 0.0]))
    assert TopK(k=1).compress(torch.ones(4)).codec == "topk"


def test_importing_the_records_loads_every_library_codec_first_with_its_fixed_id(fresh_interpreter):
    from milktea.compressors.codec import library      # imports its package first
    assert {c.name: c.id for c in library()} == WIRE_IDS
    assert all(c.cls is not None and c.cls.codec == c.name for c in library())


def test_a_user_codec_takes_a_free_id_and_names_are_checked():
    from milktea.compressors import get_codec, register_codec
    from milktea.compressors.codec import FIRST_USER_ID, library, lookup

    def decode_nothing(packet, out=None):
        raise ValueError("never called")
    assert all(c.id < FIRST_USER_ID for c in library())
    codec = register_codec("test-registry-user", 231, decode_nothing, expansion=2.0)
    assert codec.id == 231 and get_codec("test-registry-user") is codec
    assert lookup("test-registry-user").expansion == 2.0
    assert register_codec("test-registry-user", 231, decode_nothing, expansion=1.0).expansion == 1.0  # reloaded
    with pytest.raises(ValueError, match="one of the library's codecs"):
        register_codec("sign", 232, decode_nothing, expansion=1.0)
    with pytest.raises(ValueError, match="taken by 'test-registry-user'"):
        register_codec("test-registry-other", 231, decode_nothing, expansion=1.0)
    with pytest.raises(TypeError, match="callables"):
        register_codec("test-registry-other", 233, "not a function", expansion=1.0)
    with pytest.raises(ValueError, match="expansion"):
        register_codec("test-registry-other", 233, decode_nothing, expansion=0)
    with pytest.raises(ValueError, match="unknown codec 'zip'"):
        get_codec("zip")
