"""Checkpoints of a hooked DDP run: one file per rank.

    milktea.ddp.save_checkpoint("ckpt", model, optimizer, state)    # every rank, same path
    ...new processes, same world size...
    milktea.ddp.load_checkpoint("ckpt", model, optimizer, state)

The model and optimizer are the same on every rank, but the hook's state is not: each rank
has its own ledgers (what it has not sent yet) and random streams. One file that every
rank writes would keep one rank's ledger for all of them, silently. So each rank writes
`<path>/rank<r>-of-<N>.pt` and reads back its own; loading refuses another world size.
(torch.distributed.checkpoint deduplicates entries saved under the same key by several
ranks, which is exactly what must not happen to per-rank ledgers.) `coder_state` is what a
rank keeps of one compressor copy: its own state and its random generators.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def _file(path: str, rank: int, world: int) -> str:
    return os.path.join(path, f"rank{rank}-of-{world}.pt")


def save_checkpoint(path: str, model, optimizer=None, state=None, **extra) -> str:
    """Write this rank's file under directory `path` (created): the model's weights, the
    optimizer's and the hook's state, and any `extra` items. Call it on every rank; it
    returns once every rank has written. Returns this rank's file name."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a directory name, got {type(path).__name__}")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(path, exist_ok=True)
    module = getattr(model, "module", model)
    data = {"rank": rank, "world": world, "model": module.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "hook": state.state_dict() if state is not None else None, "extra": extra}
    name = _file(path, rank, world)
    torch.save(data, name + ".tmp")
    os.replace(name + ".tmp", name)          # never a half-written file under the real name
    dist.barrier()
    return name


def load_checkpoint(path: str, model, optimizer=None, state=None) -> dict:
    """Load this rank's file from `path` into the model, optimizer and hook state (those
    given); return the `extra` items saved with it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    name = _file(path, rank, world)
    if not os.path.isfile(name):
        found = sorted(f for f in os.listdir(path) if f.endswith(".pt")) if os.path.isdir(path) else []
        raise ValueError(f"no checkpoint for rank {rank} of {world} in {path!r} (found: {found or 'nothing'}); "
                         "restart with the world size it was saved with")
    data = torch.load(name, map_location="cpu", weights_only=False)
    getattr(model, "module", model).load_state_dict(data["model"])
    if optimizer is not None:
        optimizer.load_state_dict(data["optimizer"])
    if state is not None:
        if data["hook"] is None:
            raise ValueError(f"{name} holds no hook state (saved without state=)")
        state.load_state_dict(data["hook"])
    return data["extra"]


# --- a compressor copy's state (the DDP hook's protocols and the compressed all-reduce save it) ---
def _generators(obj, path="", uncovered=False) -> dict:
    """Every torch.Generator a compressor holds (Chain: its stages' too), by attribute path.
    uncovered: only those its state_dict does not already keep (a library Compressor keeps
    its `_gen`, if every holder on the way saves the state of what it holds)."""
    from milktea.compressors.base import Compressor
    if uncovered and not hasattr(obj, "state_dict"):
        uncovered = False          # from here down nothing is kept by a state_dict
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, torch.Generator):
            if not (uncovered and k == "_gen" and isinstance(obj, Compressor)):
                out[path + k] = v
        elif hasattr(v, "compress") and hasattr(v, "__dict__"):
            out.update(_generators(v, f"{path}{k}.", uncovered))
    return out


def coder_state(c) -> dict:
    """One compressor copy's state for a checkpoint: its own `state_dict` (if it has one)
    and the state of every random generator that state does not hold, so a restored copy
    rounds exactly as the saved one would have."""
    return {"state": c.state_dict() if hasattr(c, "state_dict") else None,
            "generators": {k: g.get_state() for k, g in _generators(c, uncovered=True).items()}}


def load_coder_state(c, saved: dict) -> None:
    """Restore what `coder_state` returned into the copy `c`."""
    if saved["state"] is not None:
        c.load_state_dict(saved["state"])
    gens = _generators(c)
    for k, g in saved["generators"].items():
        if k not in gens:
            raise ValueError(f"saved state has a random generator at {k!r}; this compressor has "
                             f"{sorted(gens) or 'none'}")
        gens[k].set_state(g)
