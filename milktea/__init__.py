"""milktea: communication-efficient distributed training, one small idea per module.

>>> import torch, milktea
>>> packet = milktea.TopK(ratio=0.01).compress(torch.randn(10_000))
>>> packet.nbytes == len(packet.to_bytes())
True
"""
from .compressors import (QSGD, Cast, Chain, Compressor, Identity, PowerSGD, Quantize, RandomK,
                          Sign, TernGrad, TopK)
from .feedback import DGC, ErrorFeedback, warmup_ratio
from .packet import Packet, decode

__version__ = "0.1.0"

__all__ = ["Packet", "decode", "Compressor", "Identity", "TopK", "RandomK", "Quantize", "QSGD",
           "TernGrad", "Sign", "Cast", "PowerSGD", "Chain", "ErrorFeedback", "DGC", "warmup_ratio"]
