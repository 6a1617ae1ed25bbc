"""Every compressor: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``."""
from .base import Compressor, Identity, _decode_dense
from .cast import Cast
from .chain import Chain
from .powersgd import PowerSGD, orthonormalize
from .quantize import QSGD, Quantize, TernGrad
from .sign import Sign
from .sparse import RandomK, Sparsifier, TopK, sparse_decode
from ..packet import register_decoder

register_decoder("dense", _decode_dense)

__all__ = ["Compressor", "Identity", "TopK", "RandomK", "Sparsifier", "Quantize", "QSGD",
           "TernGrad", "Sign", "Cast", "PowerSGD", "Chain", "orthonormalize", "sparse_decode"]
