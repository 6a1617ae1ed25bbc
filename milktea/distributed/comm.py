"""Blocking collectives for the hooks: all-reduce, and all-gather of variable-size byte
strings (sizes first, then the padded bytes), each through an optional emulated link and
counted in a StatsLog."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from milktea.distributed.link import EmulatedLink, allgather_wire_bytes, allreduce_wire_bytes
from milktea.distributed.stats import StatsLog

# torch >= 2.10 renamed all_gather_into_tensor (the old name warns); older torch lacks the new one
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def default_timeout():
    """The default process group's collective timeout (init_process_group's `timeout`), for
    a group of our own: `new_group` would otherwise give it torch's default (30 minutes for
    gloo), and a rank waiting there for a peer that stopped would wait that long. None
    where this torch does not say (then new_group's own default applies)."""
    try:
        group = dist.distributed_c10d._get_default_group()
        device = torch.device("cuda" if dist.get_backend() == "nccl" else "cpu")
        return group._get_backend(device).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None


class Comm:
    """Collectives on `group` (None: the default group) for one hook state."""

    def __init__(self, group=None, link: EmulatedLink | None = None, log: StatsLog | None = None):
        if link is not None and not isinstance(link, EmulatedLink):
            raise TypeError(f"link must be a milktea.distributed.EmulatedLink (e.g. EmulatedLink.gbit(1)) or None, "
                            f"got {type(link).__name__}")
        self.group, self.link, self.log = group, link, log
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def _finish(self, step, issued, work, kind, nbytes, wire) -> None:
        predicted = self.link.predict(kind, nbytes, self.world) if self.link is not None else 0.0
        end = self.link.occupy(issued, predicted) if self.link is not None else issued
        work.wait()
        if self.link is not None:
            self.link.wait_until(end)
        if self.log is not None:
            self.log.add(step, comm_s=time.perf_counter() - issued, wire_bytes=wire,
                         predicted_comm_s=predicted, collectives=1, op=(kind, nbytes))

    def all_reduce(self, tensor: torch.Tensor, step: int = 0, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """Sum (or `op`) `tensor` over the ranks, in place."""
        issued = time.perf_counter()
        work = dist.all_reduce(tensor, op=op, group=self.group, async_op=True)
        nbytes = tensor.numel() * tensor.element_size()
        self._finish(step, issued, work, "allreduce", nbytes, allreduce_wire_bytes(nbytes, self.world))
        return tensor

    def all_gather_bytes(self, payload: torch.Tensor, step: int = 0) -> list[torch.Tensor]:
        """Every rank's uint8 `payload` (sizes may differ), in rank order."""
        if payload.dtype != torch.uint8 or payload.dim() != 1:
            raise TypeError(f"payload must be a 1-D uint8 tensor, got {payload.dtype} of shape {tuple(payload.shape)}")
        dev = payload.device
        issued = time.perf_counter()
        size = torch.tensor([payload.numel()], dtype=torch.int64, device=dev)
        sizes = torch.empty(self.world, dtype=torch.int64, device=dev)
        work = _all_gather_flat(sizes, size, group=self.group, async_op=True)
        self._finish(step, issued, work, "allgather", 8, allgather_wire_bytes(8, self.world))
        sizes = sizes.tolist()
        width = max(sizes)
        if payload.numel() == width:
            send = payload
        else:
            send = torch.zeros(width, dtype=torch.uint8, device=dev)
            send[: payload.numel()] = payload
        out = torch.empty(self.world * width, dtype=torch.uint8, device=dev)
        issued = time.perf_counter()
        work = _all_gather_flat(out, send, group=self.group, async_op=True)
        self._finish(step, issued, work, "allgather", width, allgather_wire_bytes(width, self.world))
        return [out[r * width: r * width + n] for r, n in enumerate(sizes)]
