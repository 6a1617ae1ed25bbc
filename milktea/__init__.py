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
import sys as _sys
import types as _types

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
    **dict.fromkeys(["History", "simulate"], "simulate"),
    **dict.fromkeys(["Digits", "Quadratic", "Targets", "Task"], "tasks"),
    "ddp": "ddp",  # the module itself: milktea.ddp.compress (DDP communication hooks)
    "fsdp": "fsdp",  # the package itself: milktea.fsdp.compress (FSDP2's collectives)
    **dict.fromkeys(["EmulatedLink", "WorkerError", "launch"], "distributed"),
}

__all__ = list(_WHERE)

# Public names that are also submodule names but mean something else (milktea.simulate is
# the function, not the module), as they did when this file imported everything eagerly.
_MODULES = {"ddp", "fsdp"}      # names that stand for the module itself
_NOT_THE_MODULE = {name for name, where in _WHERE.items() if name == where and name not in _MODULES}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'milktea' has no attribute {name!r}")
    module = _importlib.import_module(f".{_WHERE[name]}", __name__)
    value = module if name in _MODULES else getattr(module, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(_types.ModuleType):
    def __setattr__(self, name, value):
        # Importing milktea.simulate binds the submodule as an attribute of the package;
        # keep the public function of that name instead (see _NOT_THE_MODULE).
        if name in _NOT_THE_MODULE and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
