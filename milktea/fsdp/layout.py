"""Where each parameter sits in FSDP2's flat communication buffers.

FSDP2 (`torch.distributed.fsdp.fully_shard`) reduces the gradients of one module's
parameters together: it lays them out in one flat buffer of N rows, row j holding what
rank j will own (each parameter's rows j*ceil(d0/N)... of its first dimension, padded
with zeros to an equal share), and calls the reduce-scatter on it; the all-gather of the
weights is the same picture in reverse: this rank's row in, all N rows out. Inside a row
the parameters come one after another, each `padded_sharded_param_size` long:

    row j = [ weight's rows for j | bias's entries for j | ... ]     (one `Segment` each)

A compressor then runs per destination row and per parameter, as the DDP hook runs per
parameter: a quantizer's blocks never span two layers, Top-K's budget is per layer.

    >>> split_rows(torch.arange(12.), 3).tolist()        # rank j's share is row j
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]
    >>> segs = [Segment("w", (2, 1), 2), Segment("b", (2,), 2)]
    >>> [tuple(v.shape) for v in views(torch.zeros(4), segs)]
    [(2, 1), (2,)]

This module is also the one place that reads FSDP2's private state (its parameter
groups, padded sizes and mesh kind); `tests/unit/test_fsdp_layout.py` checks those names
against the installed torch, so a torch that moves them fails there, by name.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Segment:
    """One parameter's piece of a row: `name` (the parameter's name in the model), its
    padded shard `shape`, and `numel` entries."""
    name: str
    shape: tuple
    numel: int


@dataclass
class Group:
    """One FSDP parameter group (one `fully_shard` call): the module's name in the model,
    its parameter group, the segments of a reduce-scatter row (parameters that get
    gradients) and of an all-gather row (every parameter)."""
    module: str
    group: object                 # torch's FSDPParamGroup
    grad_segments: list
    weight_segments: list
    fsdp_module: object = None    # the FSDPModule (its public set_custom_* methods)

    @property
    def row_numel(self) -> int:
        return sum(s.numel for s in self.weight_segments)


def split_rows(flat: torch.Tensor, world: int) -> torch.Tensor:
    """The reduce-scatter input as [world, row] (a view): row j is what rank j owns."""
    if flat.dim() != 1 or flat.numel() % world:
        raise ValueError(f"a reduce-scatter input is flat with a multiple of {world} entries, "
                         f"got shape {tuple(flat.shape)}")
    return flat.view(world, -1)


def views(row: torch.Tensor, segments) -> list[torch.Tensor]:
    """Each segment's view into a flat row, shaped like its padded shard; one flat view of
    the whole row when the segments do not add up to it (then FSDP sent a subset)."""
    if sum(s.numel for s in segments) != row.numel():
        return [row]
    out, start = [], 0
    for s in segments:
        out.append(row[start:start + s.numel].view(s.shape))
        start += s.numel
    return out


def names(row: torch.Tensor, segments, module: str) -> list[str]:
    """The names `views` stands for: the parameters', or the module's for a whole row."""
    if sum(s.numel for s in segments) != row.numel():
        return [f"{module}[{row.numel()}]"]
    return [s.name for s in segments]


def fsdp_modules(model) -> list[tuple[str, object]]:
    """Every module of `model` that `fully_shard` was applied to, with its name, outermost
    first; TypeError if there is none."""
    from torch.distributed.fsdp import FSDPModule
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module with fully_shard applied, got {type(model).__name__}")
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, FSDPModule)]
    if not found:
        raise TypeError(f"{type(model).__name__} has no module that fully_shard was applied to; call "
                        "torch.distributed.fsdp.fully_shard(layer) on each layer and then on the model itself, "
                        "before milktea.fsdp.compress")
    return found


def groups_of(model) -> list[Group]:
    """The parameter groups of every FSDP module of `model`, with their segments (a module
    without parameters of its own, such as a root over wrapped layers, has none).
    ValueError for a module whose parameters sit on several meshes (`shard_placement_fn`
    returning a mesh of its own), where FSDP2 takes no custom collective."""
    modules = fsdp_modules(model)
    param_names = {id(p): n for n, p in model.named_parameters()}
    out = []
    for mod_name, module in modules:
        groups = module._get_fsdp_state()._fsdp_param_groups
        if len(groups) > 1:
            raise ValueError(f"module {mod_name or '(the model)'!r} has its parameters on {len(groups)} meshes "
                             "(shard_placement_fn returned a mesh of its own): FSDP2 takes no custom "
                             "reduce-scatter or all-gather there, since one collective would have to span "
                             "several process groups; shard it on one mesh (shard_placement_fn may still "
                             "choose the dimension: Shard(d)), or leave that module out of the model you "
                             "compress")
        for g in groups:
            grad, weight = [], []
            for fp in g.fsdp_params:
                p = fp.sharded_param
                seg = Segment(param_names.get(id(p), f"{mod_name}.?"), tuple(fp.padded_sharded_param_size),
                              int(fp.padded_sharded_param_size.numel()))
                weight.append(seg)
                if p.requires_grad:
                    grad.append(seg)
            out.append(Group(mod_name, g, grad, weight, module))
    return out


def mesh_kind(group) -> str:
    """'fsdp' (1-D sharding), 'hsdp' (FSDP2's own 2-D replicate x shard mesh) or 'ddp'
    (replicate only) for a parameter group."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import DDPMeshInfo, FSDPMeshInfo
    info = group.mesh_info
    if isinstance(info, FSDPMeshInfo) and isinstance(info, DDPMeshInfo):
        return "hsdp"
    return "fsdp" if isinstance(info, FSDPMeshInfo) else "ddp"


def divide_factor(group, op, world: int) -> float:
    """What the sum of the N contributions is divided by for this reduce-scatter's `op`:
    N for AVG, 1 for SUM (FSDP divides itself, before or after), and the group's own
    `set_gradient_divide_factor` for PREMUL_SUM."""
    import torch.distributed as dist
    if op == dist.ReduceOp.AVG:
        return float(world)
    if op == dist.ReduceOp.SUM:
        return 1.0
    factor = getattr(group, "gradient_divide_factor", None)
    if factor is None:
        raise ValueError(f"reduce-scatter op {op!r} is neither AVG nor SUM and the module has no "
                         "gradient divide factor: milktea.fsdp reduces with AVG, SUM or "
                         "set_gradient_divide_factor's PREMUL_SUM")
    return float(factor)


def in_backward() -> bool:
    """True while autograd runs a backward pass (FSDP's re-gather of the weights for it),
    False in the forward pass."""
    return torch._C._current_graph_task_id() != -1
