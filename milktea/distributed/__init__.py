"""Multi-process runtime: launcher, DDP communication hooks, slow links, comparison.

    from milktea.distributed import launch, Pool, compress, EmulatedLink, compare

`launch` and `compare` are bound here, after their submodules of the same names load, so
that the functions (not the modules) are what these names mean. NetnsLink loads on first
use, so that `python -m milktea.distributed.netns` does not import its own module twice.
"""
from milktea.distributed.compare import compare
from milktea.distributed.hooks import CompressionState, compress
from milktea.distributed.launch import WorkerError, WorkerHang, launch
from milktea.distributed.link import EmulatedLink
from milktea.distributed.pool import Pool

__all__ = ["CompressionState", "EmulatedLink", "NetnsLink", "Pool", "WorkerError", "WorkerHang", "compare",
           "compress", "launch"]


def __getattr__(name):
    if name == "NetnsLink":
        from milktea.distributed.netns import NetnsLink
        return NetnsLink
    raise AttributeError(f"module 'milktea.distributed' has no attribute {name!r}")
