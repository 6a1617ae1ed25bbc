"""Multi-process runtime: launcher, DDP communication hooks, slow links, comparison."""
from milktea.dist.launch import WorkerError, default_threads, launch, report

__all__ = ["WorkerError", "default_threads", "launch", "report"]
