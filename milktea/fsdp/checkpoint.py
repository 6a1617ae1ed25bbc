"""Checkpoints of an FSDP2 run with milktea's collectives: one file per rank.

    milktea.fsdp.save_checkpoint("ckpt", model, optimizer, state, step=100)   # every rank
    ...new processes, the same world size and sharding...
    extra = milktea.fsdp.load_checkpoint("ckpt", model, optimizer, state)     # {"step": 100}

Each rank holds its own shards of the weights and of the optimizer's state (FSDP2's
`state_dict()` gives them as DTensors) and its own ledgers and random streams
(`FSDPCompression.state_dict()`), so each writes `<path>/rank<r>-of-<N>.pt` and reads
back its own: the DDP hook's per-rank files (`milktea.ddp.save_checkpoint`), unchanged.
A run resumed from them in new processes continues bit for bit.
"""
from ..distributed.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
