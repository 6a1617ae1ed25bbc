"""milktea compressors on PyTorch DDP, in one call.

    import milktea
    from milktea import TopK
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = milktea.ddp.compress(model, TopK(ratio=0.01), error_feedback=True)
    state.stats.last                     # bytes, ratio, compress/communicate/decode time
    milktea.ddp.save_checkpoint("ckpt", model, optimizer, state)   # one file per rank
    ...
    milktea.ddp.end_script()             # last line, after dist.destroy_process_group()

See milktea.distributed.hooks.compress for the options (min_size, dense, start_step, link,
policy="auto", ...) and milktea.distributed.link.EmulatedLink for a slow link on a laptop.
"""
import sys

from milktea.distributed.checkpoint import load_checkpoint, save_checkpoint
from milktea.distributed.hooks import CompressionState, compress
from milktea.distributed.link import EmulatedLink
from milktea.distributed.worker import end_process


def dense(model, **options) -> CompressionState:
    """Plain averaging all-reduce through milktea's hook (same statistics and link)."""
    return compress(model, None, **options)


def _interactive() -> bool:
    """True at the Python prompt or in a running IPython/Jupyter kernel. A script that has
    merely imported ipykernel or IPython (a test run, a tool) is not interactive: asking
    IPython for its running shell tells the two apart."""
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return True
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    return get_ipython is not None and get_ipython() is not None


def end_script(code: int = 0) -> None:
    """The last line of a script that trained with DDP, after dist.destroy_process_group():
    flush stdout and stderr, then leave the process at once with exit status `code`.

    A normal exit can abort after all the work is done ("terminate called without an
    active exception"): DDP keeps its gloo threads running while the interpreter tears
    itself down (milktea.distributed.worker.end_process has the details). In an interactive
    session (a Jupyter kernel, the Python prompt) it only flushes and returns, so the
    session goes on.
    """
    if _interactive():
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        return
    end_process(code)


__all__ = ["CompressionState", "EmulatedLink", "compress", "dense", "end_script", "load_checkpoint",
           "save_checkpoint"]
