"""The codec ids belong to the wire format; the decoders to a registry at the bottom of
`milktea.compressors`, which loads every library codec before anyone can register one.

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


def test_a_user_id_below_64_is_refused_before_and_after_the_library_loads(fresh_interpreter):
    import milktea.packet as packet
    assert "milktea.compressors" not in sys.modules
    with pytest.raises(ValueError, match=r"ids 0 to 63 are the library's \(3 is 'quant'\); give 'mine' an id "
                                         r"from 64 to 255"):
        packet.claim_id("mine", 3, expansion=1.0)
    # the wire format reads the library's packets alone: their ids are its own table
    p = packet.Packet.from_bytes(RAW)
    assert p.codec == "topk" and p.shape == (3,) and "milktea.compressors" not in sys.modules
    from milktea.compressors import TopK, decode, register_codec    # what used to fail
    with pytest.raises(ValueError, match="library's"):
        register_codec("mine", 3, lambda packet, out=None: None, expansion=1.0)
    assert torch.equal(decode(p), torch.tensor([0.0, 2.0, 0.0]))
    assert TopK(k=1).compress(torch.ones(4)).codec == "topk"


def test_importing_the_registry_loads_every_library_codec_first(fresh_interpreter):
    from milktea.compressors.registry import get_codec      # imports its package first
    for name in milktea.packet.LIBRARY_CODECS:
        assert get_codec(name).id == milktea.packet.LIBRARY_CODECS[name].id


def test_a_user_codec_takes_a_free_id_and_names_are_checked():
    from milktea.compressors import get_codec, register_codec
    from milktea.packet import FIRST_USER_ID, LIBRARY_CODECS, codec_id

    def decode_nothing(packet, out=None):
        raise ValueError("never called")
    assert all(c.id < FIRST_USER_ID for c in LIBRARY_CODECS.values())
    codec = register_codec("test-registry-user", 231, decode_nothing, expansion=2.0)
    assert codec.id == 231 and get_codec("test-registry-user") is codec
    assert codec_id("test-registry-user").expansion == 2.0
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
