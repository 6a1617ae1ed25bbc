"""The bytes' way across: an all-to-all and an all-gather of byte strings, on FSDP2's group.

Packets differ in size (Top-K's index coding, headers), so each collective sends the
sizes first (a table of N int64 per rank), then every byte string padded to the widest,
in one `all_to_all_single` or `all_gather_single`: collectives that gloo (CPU) and NCCL
(GPU) both have for equal splits. Every tensor made here lives on the payload's device,
which is where FSDP2 keeps the gradients and weights (the mesh's device: CUDA with NCCL,
the CPU with gloo), so the same code is the GPU path.

With an emulated link (`milktea.distributed.link.EmulatedLink`) each collective then
takes at least what the cost model gives for it on that link: the real collective runs,
then the caller waits out the rest, on the process's one link timeline.

    >>> wire = Wire()
    >>> wire
    Wire(no emulated link)
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ..distributed.link import EmulatedLink, settle
from . import cost as fcost

# torch >= 2.10 names it all_gather_single (the old name warns)
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Wire:
    """The collectives of one `FSDPCompression`, timed, counted and (optionally) slowed to
    an emulated link. Each method returns what arrived and a `Sent` record."""

    def __init__(self, link: EmulatedLink | None = None):
        if link is not None and not isinstance(link, EmulatedLink):
            raise TypeError(f"link must be a milktea.distributed.EmulatedLink (e.g. EmulatedLink.gbit(1)) or None, "
                            f"got {type(link).__name__}")
        self.link = link

    def _wait(self, issued: float, work, collective: str, nbytes: int, world: int,
              seconds: float | None = None) -> tuple[float, float]:
        """Finish a collective issued at `issued`, on the link if there is one (the library's
        one wait, `milktea.distributed.link.settle`): (comm s, link s)."""
        return settle(work, collective, nbytes, world, self.link, issued=issued, seconds=seconds)

    def size_table(self, sizes: list[int], group, device) -> tuple[torch.Tensor, "Sent"]:
        """table[i, j]: the bytes rank i sends rank j (one all-gather of N int64 per rank)."""
        world = len(sizes)
        mine = torch.tensor(sizes, dtype=torch.int64, device=device)
        table = torch.empty(world * world, dtype=torch.int64, device=device)
        issued = time.perf_counter()
        work = _all_gather_flat(table, mine, group=group, async_op=True)
        comm_s, link_s = self._wait(issued, work, "allgather", 8 * world, world)
        return table.view(world, world), Sent(fcost.all_gather_bytes(8 * world, world), comm_s, link_s)

    def all_to_all(self, payloads: list[torch.Tensor], group) -> tuple[list[torch.Tensor], "Sent"]:
        """payloads[j] (1-D uint8) goes to rank j; returns what each rank sent this one, in
        rank order (this rank's own slot: its payloads[rank], which does not travel)."""
        world, rank = group.size(), group.rank()
        if len(payloads) != world:
            raise ValueError(f"need one payload per rank ({world}), got {len(payloads)}")
        dev = payloads[0].device
        table, first = self.size_table([int(p.numel()) for p in payloads], group, dev)
        others = [j for j in range(world) if j != rank]
        off_diagonal = table * (1 - torch.eye(world, dtype=table.dtype, device=dev))
        width = int(off_diagonal.max())        # the same on every rank: equal splits need one width
        send = torch.zeros(world, width, dtype=torch.uint8, device=dev)
        for j in others:
            send[j, : payloads[j].numel()] = payloads[j]
        recv = torch.empty(world, width, dtype=torch.uint8, device=dev)
        issued = time.perf_counter()
        work = dist.all_to_all_single(recv.view(-1), send.view(-1), group=group, async_op=True)
        c, k = self._wait(issued, work, "alltoall", width, world)
        sizes = table[:, rank].tolist()
        got = [payloads[rank] if i == rank else recv[i, : sizes[i]] for i in range(world)]
        return got, Sent(first.bytes + sum(int(payloads[j].numel()) for j in others), first.comm_s + c,
                         first.link_s + k)

    def all_gather(self, payload: torch.Tensor, group) -> tuple[list[torch.Tensor], "Sent"]:
        """Every rank's 1-D uint8 `payload`, in rank order."""
        world = group.size()
        dev = payload.device
        table, first = self.size_table([int(payload.numel())] * world, group, dev)
        sizes = table[:, 0].tolist()
        width = max(sizes)
        send = torch.zeros(width, dtype=torch.uint8, device=dev)
        send[: payload.numel()] = payload
        out = torch.empty(world * width, dtype=torch.uint8, device=dev)
        issued = time.perf_counter()
        work = _all_gather_flat(out, send, group=group, async_op=True)
        c, k = self._wait(issued, work, "allgather", width, world)
        sent = first.bytes + fcost.all_gather_bytes(payload.numel(), world)
        return ([out[r * width: r * width + m] for r, m in enumerate(sizes)],
                Sent(sent, first.comm_s + c, first.link_s + k))

    def reduce_scatter(self, output, input, group, op) -> "Sent":
        """FSDP2's own reduce-scatter, counted (and slowed to the link)."""
        world, nbytes = group.size(), input.numel() * input.element_size()
        issued = time.perf_counter()
        work = dist.reduce_scatter_single(output, input, group=group, op=op, async_op=True)
        comm_s, link_s = self._wait(issued, work, "reduce_scatter", nbytes, world,
                                    fcost.reduce_scatter_time(nbytes, world, self.link.link) if self.link else None)
        return Sent(fcost.reduce_scatter_bytes(nbytes, world), comm_s, link_s)

    def all_gather_dense(self, output, input, group) -> "Sent":
        """FSDP2's own all-gather, counted (and slowed to the link)."""
        world, nbytes = group.size(), input.numel() * input.element_size()
        issued = time.perf_counter()
        work = _all_gather_flat(output, input, group=group, async_op=True)
        comm_s, link_s = self._wait(issued, work, "allgather", nbytes, world)
        return Sent(fcost.all_gather_bytes(nbytes, world), comm_s, link_s)

    def __repr__(self) -> str:
        return f"Wire({self.link!r})" if self.link is not None else "Wire(no emulated link)"


class Sent:
    """What one collective cost this rank: bytes sent, seconds inside it, the link model's seconds."""
    __slots__ = ("bytes", "comm_s", "link_s")

    def __init__(self, nbytes: float, comm_s: float, link_s: float):
        self.bytes, self.comm_s, self.link_s = float(nbytes), comm_s, link_s

    def __repr__(self) -> str:
        return f"Sent({self.bytes:,.0f} bytes, {self.comm_s * 1e3:.2f} ms, link model {self.link_s * 1e3:.2f} ms)"
