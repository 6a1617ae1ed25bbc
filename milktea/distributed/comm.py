"""Blocking collectives for the hooks' protocols: all-reduce, all-gather of byte strings
of different lengths (sizes first, then the bytes) and all-to-all, each waited for
through the optional emulated link and counted in a StatsLog (`link.settle`)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from milktea.distributed.link import EmulatedLink, settle
from milktea.distributed.stats import StatsLog

def _gather_into(pg):
    """The process group's own all-gather into one tensor (output, input) -> Work."""
    return getattr(pg, "all_gather_single", None) or pg._allgather_base


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
        # the process group's own methods: the collectives of torch.distributed without its
        # Python wrappers (a dozen calls each), issued once per bucket and more
        self._pg = group if group is not None else dist.group.WORLD
        self._gather = _gather_into(self._pg)
        self._send: torch.Tensor | None = None          # all_gather_bytes's buffers, kept
        self._recv: dict[int, torch.Tensor | None] = {}
        self._device = torch.device("cpu")

    def _wait(self, work, collective: str, nbytes: int, step: int, issued: float) -> None:
        settle(work, collective, nbytes, self.world, self.link, self.log, step, issued)

    def all_reduce(self, tensor: torch.Tensor, step: int = 0, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """Sum (or `op`) `tensor` over the ranks, in place."""
        issued = time.perf_counter()
        work = self._pg.allreduce([tensor], op)
        self._wait(work, "allreduce", tensor.numel() * tensor.element_size(), step, issued)
        return tensor

    def send_buffer(self, nbytes: int, keep: int = 0, device=None) -> torch.Tensor:
        """This rank's send buffer for the all-gathers (1-D uint8 on `device`, default the
        last payload's; kept between calls), at least `nbytes` long: a payload written at
        its start is sent without a copy. When it must grow, its first `keep` bytes move
        to the new one, which gets 1/32 to spare past the first time (a Top-K payload
        varies a little from step to step)."""
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
        """Every rank's uint8 `payload` (sizes may differ), in rank order (see `all_gather_tailed`)."""
        return self.all_gather_tailed(payload, None, step)[0]

    def all_gather_tailed(self, payload: torch.Tensor, tail: int | None, step: int = 0):
        """(every rank's uint8 `payload`, in rank order; every rank's last `tail` bytes of it
        on the host, as uint8 numpy arrays): a rank's packets' headers, which the DDP hook
        lays at the end of its payload, reach the host without a copy per packet.

        The result is views into buffers this Comm keeps and reuses: read them before the
        next call. The sizes go first (one int64 per rank; two with a `tail`). On the CPU (gloo)
        each rank's bytes are one in-place broadcast from that rank into a buffer kept per
        rank, so a step allocates nothing of the payload's size (gloo's all-gather would
        copy every rank's bytes into a temporary as large as all of them); on a GPU, one
        all-gather of the padded payloads, and one copy of every rank's tail to the host.
        Counted as one all-gather.

        The broadcasts go one after another, each finished before the next is issued: one
        collective in flight on the group at a time, as every other caller of a process
        group has it. (Issued together, they ran on gloo's worker threads at once; once
        in a CI run, a 3-rank group then waited until its timeout.)"""
        if payload.dtype != torch.uint8 or payload.dim() != 1:
            raise TypeError(f"payload must be a 1-D uint8 tensor, got {payload.dtype} of shape {tuple(payload.shape)}")
        dev, n, W = payload.device, payload.numel(), self.world
        if self._send is None or self._send.device != dev or payload.data_ptr() != self._send.data_ptr():
            self.send_buffer(n, device=dev)[:n].copy_(payload)          # else: written in place already
        issued = time.perf_counter()
        size = torch.tensor([n] if tail is None else [n, tail], dtype=torch.int64, device=dev)
        sizes = torch.empty(W * size.numel(), dtype=torch.int64, device=dev)
        self._wait(self._gather(sizes, size), "allgather", 8 * size.numel(), step, issued)
        sizes = sizes.tolist()
        lengths, tails = (sizes, None) if tail is None else (sizes[0::2], sizes[1::2])
        width = max(lengths)
        issued = time.perf_counter()
        if dev.type == "cpu":
            parts, heads = [], []
            for r, m in enumerate(lengths):
                p = self._send[:n] if r == self.rank else self._recv_buffer(r, m)
                if m:
                    self._pg.broadcast(p, r).wait()
                parts.append(p)
                if tail is not None:
                    heads.append(p[m - tails[r]:].numpy())
            self._wait(None, "allgather", width, step, issued)
            return parts, heads if tail is not None else None
        send = self.send_buffer(width, keep=n, device=dev)[:width]
        send[n:].zero_()
        out = self._recv_buffer(-1, W * width)
        self._wait(self._gather(out, send), "allgather", width, step, issued)
        parts = [out[r * width: r * width + m] for r, m in enumerate(lengths)]
        if not tail:
            return parts, None
        host = torch.cat([p[p.numel() - t:] for p, t in zip(parts, tails)]).cpu().numpy()
        ends = [0]
        for t in tails:
            ends.append(ends[-1] + t)
        return parts, [host[a:b] for a, b in zip(ends, ends[1:])]

    def all_to_all_bytes(self, payloads: list[torch.Tensor], step: int = 0) -> list[torch.Tensor]:
        """payloads[j] (uint8) goes to rank j; returns what every rank sent to this one, in
        rank order (see `all_to_all_tailed`)."""
        return self.all_to_all_tailed(payloads, None, step)[0]

    def all_to_all_tailed(self, payloads: list[torch.Tensor], tails: list[int] | None, step: int = 0):
        """(what every rank sent to this one, in rank order; the last tails[this rank] bytes
        of each, on the host, where `tails` is given: the headers of packets laid out by
        `lay_out`). Sizes differ, so the N x N size table is all-gathered first (with the
        tails), then every payload is padded to the largest and exchanged with one
        all_to_all_single (gloo and NCCL both have it for equal splits)."""
        W, dev = self.world, payloads[0].device
        if len(payloads) != W:
            raise ValueError(f"need one payload per rank ({W}), got {len(payloads)}")
        mine = torch.tensor([p.numel() for p in payloads] + (list(tails) if tails is not None else []),
                            dtype=torch.int64, device=dev)
        table = torch.empty(W * mine.numel(), dtype=torch.int64, device=dev)
        issued = time.perf_counter()
        self._wait(self._gather(table, mine), "allgather", 8 * mine.numel(), step, issued)
        table = table.view(W, -1)
        got_tails = table[:, W + self.rank].tolist() if tails is not None else None
        table = table[:, :W]                           # table[i, j]: bytes rank i sends to rank j
        width = int(table.max())
        send = torch.zeros(W, width, dtype=torch.uint8, device=dev)
        for j, p in enumerate(payloads):
            send[j, : p.numel()] = p
        recv = torch.empty(W, width, dtype=torch.uint8, device=dev)
        issued = time.perf_counter()
        work = dist.all_to_all_single(recv.view(-1), send.view(-1), group=self.group, async_op=True)
        self._wait(work, "alltoall", width, step, issued)
        sizes = table[:, self.rank].tolist()
        got = [recv[i, : sizes[i]] for i in range(W)]
        if got_tails is None:
            return got, None
        if dev.type == "cpu":
            return got, [g[g.numel() - t:].numpy() for g, t in zip(got, got_tails)]
        host = torch.cat([g[g.numel() - t:] for g, t in zip(got, got_tails)]).cpu().numpy()
        ends = torch.tensor([0] + got_tails).cumsum(0).tolist()
        return got, [host[a:b] for a, b in zip(ends, ends[1:])]
