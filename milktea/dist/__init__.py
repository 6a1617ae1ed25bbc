"""Multi-process runtime: launcher, DDP communication hooks, slow links, comparison.

    from milktea.dist import launch, compress, EmulatedLink, compare
"""
from milktea.dist.compare import compare
from milktea.dist.hooks import CompressionState, compress
from milktea.dist.launch import WorkerError, default_threads, launch, report
from milktea.dist.link import EmulatedLink
from milktea.dist.netns import NetnsLink

__all__ = ["CompressionState", "EmulatedLink", "NetnsLink", "WorkerError", "compare", "compress",
           "default_threads", "launch", "report"]
