"""Every compressor: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``.

Each module registers the codec of its packets with :func:`milktea.packet.register_codec`.
"""
from .base import Compressor, Identity
from .cast import Cast
from .chain import Chain
from .powersgd import PowerSGD, orthonormalize
from .quantize import QSGD, Quantize, TernGrad
from .sign import Sign
from .sparse import RandomK, Sparsifier, TopK, sparse_decode

__all__ = ["Compressor", "Identity", "TopK", "RandomK", "Sparsifier", "Quantize", "QSGD",
           "TernGrad", "Sign", "Cast", "PowerSGD", "Chain", "orthonormalize", "sparse_decode"]
