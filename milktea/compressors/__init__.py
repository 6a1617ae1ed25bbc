"""Every compressor: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``.

The codec records (`codec`) and the wire format (`packet`) sit at the bottom; every
compressor module below ends with its codec's record, and this file loads them all, so
importing anything from `milktea.compressors` finds every library codec in place.
"""
from .registry import decode, decode_add, decode_mean, get_codec, library_codec, register_codec
from .codec import Codec
from .packet import Packet
from .base import Compressor, Identity
from .cast import Cast
from .chain import Chain
from .powersgd import PowerSGD, orthonormalize
from .quantize import QSGD, Quantize, TernGrad
from .sign import Sign
from .sparse import RandomK, Sparsifier, TopK, sparse_decode

__all__ = ["Compressor", "Identity", "TopK", "RandomK", "Sparsifier", "Quantize", "QSGD",
           "TernGrad", "Sign", "Cast", "PowerSGD", "Chain", "orthonormalize", "sparse_decode",
           "Codec", "Packet", "decode", "decode_add", "decode_mean", "get_codec", "library_codec", "register_codec"]
