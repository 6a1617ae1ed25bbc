"""milktea compressors on PyTorch FSDP2 (`torch.distributed.fsdp.fully_shard`).

A sharded step moves the gradient as a reduce-scatter (each rank receives the sum of its
own shard) and the weights as all-gathers (before each layer's forward, and again before
its backward). `compress` puts milktea's codecs on both, through FSDP2's own hooks
(`set_custom_reduce_scatter`, `set_custom_all_gather`, `set_all_reduce_hook`):

    from torch.distributed.fsdp import fully_shard
    import milktea.fsdp
    from milktea import Quantize

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    state = milktea.fsdp.compress(model, Quantize(bits=8, chunk=256),      # qgZ: int8 gradients
                                  weights=Quantize(bits=8, chunk=256))     # qwZ: int8 weights
    ...train as usual...
    state.stats.last          # bytes per collective in the last step, and how many fewer
    state.memory(optimizer)   # bytes this rank holds, the ledger's among them

- `compress`, `FSDPCompression` (milktea/fsdp/state.py): the collectives and their state;
  `compressor=None` keeps FSDP2's own collectives and counts them.
- `choice`: which compressors fit, and where error feedback's ledger goes (the default).
- `hsdp_mesh` (hsdp.py): HSDP with only the slow hop (between replicas) compressed.
- `cost`: ZeRO 1-3 / FSDP bytes per rank per step and memory per rank (`step_bytes`,
  `memory_per_rank`, `bytes_per_entry`).
- `run` (job.py): a real FSDP2 job on a few gloo ranks from a notebook, what it shows.
- `save_checkpoint`, `load_checkpoint`: one file per rank (weights, optimizer, ledgers).

Names load on first use: `import milktea.fsdp` does not import torch.distributed.fsdp.
"""
import importlib as _importlib

_WHERE = {
    "compress": "state", "FSDPCompression": "state",
    "FSDPStats": "stats", "StepTraffic": "stats", "COLLECTIVES": "stats",
    "hsdp_mesh": "hsdp",
    "ledger_for": "choice", "relative_error": "choice",
    "step_bytes": "cost", "memory_per_rank": "cost", "bytes_per_entry": "cost",
    "run": "job", "FSDPRun": "job", "RunConfig": "train",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'milktea.fsdp' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
