"""HSDP: compress only the slow hop, where a hook exists.

HSDP shards a model inside a group of S ranks (one node: a fast link) and replicates it
over R such groups (between nodes: the slow link). A step reduce-scatters the gradient
inside the node, then averages each reduced shard over the R replicas. FSDP2's own HSDP
(a 2-D mesh) runs that all-reduce itself, with no hook before it: `set_all_reduce_hook`
runs after it. But FSDP2 calls the same hook right after the reduce-scatter when the
model is sharded on a 1-D mesh: so milktea builds HSDP that way. The model is sharded on
the shard mesh, and the hook averages the reduced shard over the replicate group, through
the compressor, by the protocol the compressor declares (the DDP hook's: an all-gather
of packets, PowerSGD's factors, Cast's all-reduce). Its ledger sits on the reduced shard:
P/S entries per rank, not the (S-1)/S P of a ledger before the reduce-scatter.

    shard_mesh, replicas = milktea.fsdp.hsdp_mesh(replicas=2, shards=2)   # 4 ranks
    for block in model.blocks:
        fully_shard(block, mesh=shard_mesh)
    fully_shard(model, mesh=shard_mesh)
    state = milktea.fsdp.compress(model, TopK(0.01), replicate_group=replicas)
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..cost import ring_allreduce_bytes
from ..distributed import protocols
from ..distributed.comm import Comm
from ..distributed.stats import StatsLog
from . import layout


def hsdp_mesh(replicas: int, shards: int, device_type: str | None = None):
    """(the shard mesh to `fully_shard` on, the replicate process group) for R x S ranks:
    ranks r*S .. r*S+S-1 shard one copy of the model (put them on one node), rank s of
    every copy forms a replicate group. `device_type` defaults to this rank's device by the
    library's one rule (`milktea.device.rank_device` for the running backend: CUDA under
    NCCL, the CPU under gloo)."""
    from torch.distributed.device_mesh import init_device_mesh

    from ..checks import check_int
    R, S = check_int(replicas, "replicas", 1), check_int(shards, "shards", 1)
    if R * S != dist.get_world_size():
        raise ValueError(f"replicas x shards = {R} x {S} = {R * S} ranks, but the job has {dist.get_world_size()}")
    if device_type is None:
        from ..device import rank_device
        device_type = rank_device(dist.get_backend()).type
    mesh = init_device_mesh(device_type, (R, S), mesh_dim_names=("replicate", "shard"))
    return mesh["shard"], mesh.get_group("replicate")


class ReplicaHop:
    """Averages each module's reduced shard over the replicate group (FSDP2's all-reduce hook)."""

    def __init__(self, owner, group):
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"replicate_group must be a torch.distributed ProcessGroup (milktea.fsdp.hsdp_mesh "
                            f"returns one), got {type(group).__name__}")
        self.owner, self.group = owner, group
        self.replicas, self.index = dist.get_world_size(group), dist.get_rank(group)
        self.log = StatsLog()
        self.comm = Comm(group, owner.wire.link, self.log)
        c = owner.compressor
        self.coders = (protocols.get(protocols.protocol_of(c))(c, owner.ledger == "shard", self.index, self.replicas)
                       if c is not None else None)

    def hook_for(self, info: "layout.Group"):
        def hook(reduce_output: torch.Tensor) -> None:
            self.run(info, reduce_output)
        return hook

    def run(self, info, out: torch.Tensor) -> None:
        """out (this rank's reduced shard of one module) = its mean over the replicas."""
        step = len(self.owner.stats.steps)
        views = layout.views(out, info.grad_segments)
        names = layout.names(out, info.grad_segments, info.module)
        big = [protocols.Item(n, v) for n, v in zip(names, views) if v.numel() >= self.owner.min_size]
        small = [v for v in views if v.numel() < self.owner.min_size]
        if self.coders is None:
            big, small = [], views
        if big:
            self.coders.run(self.comm, big, step)
        if small:              # one plain all-reduce of what travels as it is
            flat = torch.cat([v.reshape(-1) for v in small])
            self.comm.all_reduce(flat, step)
            flat /= self.replicas
            off = 0
            for v in small:
                v.view(-1).copy_(flat[off: off + v.numel()])
                off += v.numel()
        st = self.log.close_step()
        if st is not None:
            self.owner.stats.record("all_reduce", sent=st.wire_bytes,
                                    dense=ring_allreduce_bytes(out.numel() * out.element_size(), self.replicas),
                                    comm_s=st.comm_s, codec_s=st.compress_s + st.decode_s, link_s=st.predicted_comm_s)


def counter_for(owner, info: "layout.Group"):
    """A hook that only counts FSDP2's own HSDP all-reduce (it runs after it)."""
    replicas = dist.get_world_size(info.group.mesh_info.replicate_process_group)

    def hook(reduce_output: torch.Tensor) -> None:
        nbytes = ring_allreduce_bytes(reduce_output.numel() * reduce_output.element_size(), replicas)
        owner.stats.record("all_reduce", sent=nbytes, dense=nbytes)
    return hook
