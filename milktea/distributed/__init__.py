"""Multi-process runtime: launcher, DDP communication hooks, slow links, comparison.

    from milktea.distributed import launch, compress, EmulatedLink, compare
"""
from milktea.distributed import compressed_allreduce  # noqa: F401  (registers its protocol)
from milktea.distributed.compare import compare
from milktea.distributed.hooks import CompressionState, compress
from milktea.distributed.launch import WorkerError, WorkerHang, default_threads, launch
from milktea.distributed.link import EmulatedLink
from milktea.distributed.netns import NetnsLink

__all__ = ["CompressionState", "EmulatedLink", "NetnsLink", "WorkerError", "WorkerHang", "compare", "compress",
           "default_threads", "launch"]
