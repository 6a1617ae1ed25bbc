"""milktea: communication-efficient distributed training, one small idea per module.

>>> import torch, milktea
>>> packet = milktea.TopK(ratio=0.01).compress(torch.randn(10_000))
>>> packet.nbytes == len(packet.to_bytes())
True
"""
from .compressors import (QSGD, Cast, Chain, Compressor, Identity, PowerSGD, Quantize, RandomK,
                          Sign, TernGrad, TopK)
from .cost import (Link, Timeline, allgather_time, calibrate, collective_for, comm_time,
                   gradient_bytes, iteration_time, overlapped_timeline, parameter_server_time,
                   ring_allreduce_bytes, ring_allreduce_time, scissors, step_time, waiting_fraction)
from .device import pick_device
from .feedback import DGC, ErrorFeedback, warmup_ratio
from .packet import Packet, decode
from .simulate import History, SeedDemo, seed_demo, simulate
from .tasks import Digits, Quadratic, Task
from . import ddp  # noqa: E402  (milktea.ddp.compress: DDP communication hooks)
from .distributed import EmulatedLink, WorkerError, launch

__version__ = "0.1.0"

__all__ = ["Packet", "decode", "Compressor", "Identity", "TopK", "RandomK", "Quantize", "QSGD",
           "TernGrad", "Sign", "Cast", "PowerSGD", "Chain", "ErrorFeedback", "DGC", "warmup_ratio",
           "Link", "Timeline", "allgather_time", "calibrate", "collective_for", "comm_time",
           "gradient_bytes", "iteration_time", "overlapped_timeline", "parameter_server_time",
           "ring_allreduce_bytes", "ring_allreduce_time", "scissors", "step_time", "waiting_fraction",
           "pick_device", "History", "SeedDemo", "seed_demo", "simulate", "Digits", "Quadratic", "Task",
           "ddp", "launch", "WorkerError", "EmulatedLink"]
