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
        self._global = dist.get_process_group_ranks(group) if group is not None else list(range(self.world))
        self._send: torch.Tensor | None = None          # all_gather_bytes's buffers, kept
        self._recv: dict[int, torch.Tensor | None] = {}
        self._device = torch.device("cpu")

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

    def send_buffer(self, nbytes: int, keep: int = 0, device=None) -> torch.Tensor:
        """This rank's send buffer for `all_gather_bytes` (1-D uint8 on `device`, default
        the last payload's; kept between calls), at least `nbytes` long: a payload written
        at its start is sent without a copy. When it must grow, its first `keep` bytes
        move to the new one, which gets 1/32 to spare past the first time (a Top-K
        payload varies a little from step to step)."""
        dev = self._device if device is None else torch.device(device)
        buf = self._send
        if buf is None or buf.device != dev or buf.numel() < nbytes:
            fresh = buf is None or buf.device != dev or not buf.numel()
            new = torch.empty(nbytes if fresh else nbytes + nbytes // 32, dtype=torch.uint8, device=dev)
            if keep and not fresh:
                new[:keep].copy_(buf[:keep])
            self._send, self._device = new, dev
            buf = new
        return buf

    def _recv_buffer(self, r: int, nbytes: int) -> torch.Tensor:
        buf = self._recv.get(r)
        if buf is not None and buf.device != self._device:
            buf = self._recv[r] = None
        if buf is None or buf.numel() < nbytes:
            self._recv[r] = None      # the old one goes before the new one comes
            buf = self._recv[r] = torch.empty(nbytes if buf is None else nbytes + nbytes // 32,
                                              dtype=torch.uint8, device=self._device)
        return buf[:nbytes]

    def all_gather_bytes(self, payload: torch.Tensor, step: int = 0) -> list[torch.Tensor]:
        """Every rank's uint8 `payload` (sizes may differ), in rank order.

        The result is views into buffers this Comm keeps and reuses: read them before the
        next call. On CPU (gloo) each rank's bytes are one in-place broadcast from that
        rank into a buffer kept per rank, so a step allocates nothing of the payload's
        size (gloo's all-gather would copy every rank's bytes into a temporary as large
        as all of them, and the padded send and receive buffers would be new each step);
        on GPU, one all-gather of the padded payloads. Counted as one all-gather.

        The broadcasts go one after another, each finished before the next is issued: one
        collective in flight on the group at a time, as every other caller of a process
        group has it. (Issued together, they ran on gloo's worker threads at once; once
        in a CI run, a 3-rank group then waited until its timeout.)"""
        if payload.dtype != torch.uint8 or payload.dim() != 1:
            raise TypeError(f"payload must be a 1-D uint8 tensor, got {payload.dtype} of shape {tuple(payload.shape)}")
        dev = payload.device
        n = payload.numel()
        if self._send is None or self._send.device != dev or payload.data_ptr() != self._send.data_ptr():
            self.send_buffer(n, device=dev)[:n].copy_(payload)          # else: written in place already
        issued = time.perf_counter()
        size = torch.tensor([n], dtype=torch.int64, device=dev)
        sizes = torch.empty(self.world, dtype=torch.int64, device=dev)
        work = _all_gather_flat(sizes, size, group=self.group, async_op=True)
        self._finish(step, issued, work, "allgather", 8, allgather_wire_bytes(8, self.world))
        sizes = sizes.tolist()
        width = max(sizes)
        issued = time.perf_counter()
        if dev.type == "cpu":
            parts = [self._send[:n] if r == self.rank else self._recv_buffer(r, m) for r, m in enumerate(sizes)]
            for r, p in enumerate(parts):
                if p.numel():
                    dist.broadcast(p, src=self._global[r], group=self.group, async_op=True).wait()
            self._finish(step, issued, _Done(), "allgather", width, allgather_wire_bytes(width, self.world))
            return parts
        send = self.send_buffer(width, keep=n, device=dev)[:width]
        send[n:].zero_()
        out = self._recv_buffer(-1, self.world * width)
        work = _all_gather_flat(out, send, group=self.group, async_op=True)
        self._finish(step, issued, work, "allgather", width, allgather_wire_bytes(width, self.world))
        return [out[r * width: r * width + m] for r, m in enumerate(sizes)]


class _Done:
    """A collective already waited for."""

    def wait(self):
        return True
