"""milktea compressors on PyTorch DDP, in one call.

    import milktea
    from milktea import TopK
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = milktea.ddp.compress(model, TopK(ratio=0.01), error_feedback=True)
    state.stats.last                     # bytes, ratio, compress/communicate/decode time
    milktea.ddp.save_checkpoint("ckpt", model, optimizer, state)   # one file per rank

See milktea.distributed.hooks.compress for the options (min_size, dense, start_step, link,
policy="auto", ...) and milktea.distributed.link.EmulatedLink for a slow link on a laptop.
"""
from milktea.distributed.checkpoint import load_checkpoint, save_checkpoint
from milktea.distributed.hooks import CompressionState, compress
from milktea.distributed.link import EmulatedLink


def dense(model, **options) -> CompressionState:
    """Plain averaging all-reduce through milktea's hook (same statistics and link)."""
    return compress(model, None, **options)


__all__ = ["CompressionState", "EmulatedLink", "compress", "dense", "load_checkpoint", "save_checkpoint"]
