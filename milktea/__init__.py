"""milktea: communication-efficient distributed training, one small idea per module.

>>> import torch, milktea
>>> packet = milktea.TopK(ratio=0.01).compress(torch.randn(10_000))
>>> packet.nbytes == len(packet.to_bytes())
True

`import milktea` itself loads nothing heavy: each public name below is imported from its
module on first use (PEP 562), so numba, torch.distributed and the plotting stack load
only when a part that needs them runs.
"""
import importlib as _importlib

__version__ = "0.1.0"

# public name -> the module (relative to milktea) that defines it
_WHERE = {
    **dict.fromkeys(["Compressor", "Identity", "TopK", "RandomK", "Quantize", "QSGD", "TernGrad",
                     "Sign", "Cast", "PowerSGD", "Chain", "decode", "register_codec"], "compressors"),
    **dict.fromkeys(["Link", "Timeline", "allgather_time", "calibrate",
                     "comm_time", "gradient_bytes", "iteration_time", "overlapped_timeline",
                     "parameter_server_time", "ring_allreduce_bytes", "ring_allreduce_time",
                     "step_time", "waiting_fraction"], "cost"),
    "pick_device": "device",
    "collective_for": "distributed.protocols",
    **dict.fromkeys(["ErrorFeedback", "DGC", "MomentumCorrected", "warmup_ratio"], "feedback"),
    "EF21": "ef21",
    "Packet": "packet",
    "History": "simulate",
    "simulate": "simulate",   # the module itself: milktea.simulate.simulate (N workers in one process)
    **dict.fromkeys(["Digits", "Quadratic", "Targets", "Task"], "tasks"),
    "ddp": "ddp",  # the module itself: milktea.ddp.compress (DDP communication hooks)
    "fsdp": "fsdp",  # the package itself: milktea.fsdp.compress (FSDP2's collectives)
    **dict.fromkeys(["EmulatedLink", "WorkerError", "launch"], "distributed"),
}

__all__ = list(_WHERE)
_MODULES = {"ddp", "fsdp", "simulate"}     # public names that are submodules, as Python binds them too


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'milktea' has no attribute {name!r}")
    module = _importlib.import_module(f".{_WHERE[name]}", __name__)
    value = module if name in _MODULES else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
