"""Multi-process runtime: launcher, DDP communication hooks, slow links, comparison.

    from milktea.distributed import launch, compress, EmulatedLink, compare

Names load on first use, so `python -m milktea.distributed.<module>` and a worker that
needs only the launcher import no more than they use.
"""
import importlib

_WHERE = {
    "CompressionState": "milktea.distributed.hooks", "compress": "milktea.distributed.hooks",
    "EmulatedLink": "milktea.distributed.link", "NetnsLink": "milktea.distributed.netns",
    "WorkerError": "milktea.distributed.launch", "WorkerHang": "milktea.distributed.launch",
    "default_threads": "milktea.distributed.launch", "launch": "milktea.distributed.launch",
    "compare": "milktea.distributed.compare",
}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'milktea.distributed' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_WHERE))
