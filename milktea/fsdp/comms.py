"""The collectives milktea installs in FSDP2 (`set_custom_reduce_scatter`, `set_custom_all_gather`).

FSDP2 calls a custom reduce-scatter as `comm(output_tensor, input_tensor, group, op)`
after `comm.allocate` made both: `input_tensor` is the flat gradient buffer of one
module, N rows in the reduce dtype (`MixedPrecisionPolicy.reduce_dtype`, else the
gradients'), row j what rank j will own; `output_tensor` receives this rank's row of
the reduction; `op` is AVG (fp32, bf16), SUM (fp16: FSDP divides before and after) or
PREMUL_SUM (`set_gradient_divide_factor`). It runs once per module per synchronised
backward (`set_requires_gradient_sync(False)` accumulates the unsharded gradients in
the reduce dtype and reduces them at the last micro-batch). A custom all-gather gets
`comm(output_tensor, input_tensor, group, async_op)`: this rank's flat shard of every
parameter of the module in, N such rows out, in the parameters' dtype (`param_dtype`).

CompressedReduceScatter: each row for another rank is compressed, parameter by
parameter (`codec.encode`), the rows cross in one all-to-all, and each rank sums in
float32 its own row as it is, then the others' packets decoded in rank order, divides
as `op` says and writes its shard. CompressedAllGather: this rank's shard compressed, the
packets all-gathered, every row (its own included, so every rank computes with the same
weights) decoded in place. Counted*: FSDP2's own collectives, counted in `stats`.
"""
from __future__ import annotations

import time

import torch
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from . import codec, layout
from .cost import all_gather_bytes, reduce_scatter_bytes


class _Comm:
    """What every comm here shares: its owner (the `FSDPCompression`: compressors, wire,
    stats) and its module's `layout.Group`."""

    def __init__(self, owner, info: "layout.Group"):
        self.owner, self.info = owner, info

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def _gather_kind(self) -> str:
        return "all_gather_backward" if layout.in_backward() else "all_gather_forward"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.info.module or '(root)'!r})"


class CountedReduceScatter(_Comm, ReduceScatter):
    """FSDP2's own reduce-scatter, counted (and slowed to an emulated link)."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        sent = self.owner.wire.reduce_scatter(output_tensor, input_tensor, group, op)
        self.owner.stats.record("reduce_scatter", sent=sent.bytes, dense=sent.bytes, comm_s=sent.comm_s,
                                link_s=sent.link_s)
        return None


class CountedAllGather(_Comm, AllGather):
    """FSDP2's own all-gather, counted (and slowed to an emulated link)."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        sent = self.owner.wire.all_gather_dense(output_tensor, input_tensor, group)
        self.owner.stats.record(self._gather_kind(), sent=sent.bytes, dense=sent.bytes, comm_s=sent.comm_s,
                                link_s=sent.link_s)
        return None


class CompressedReduceScatter(_Comm, ReduceScatter):
    """Each destination's row compressed, one all-to-all, the sum decoded in float32."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        owner, world, rank = self.owner, group.size(), group.rank()
        rows = layout.split_rows(input_tensor, world)
        segs, mod = self.info.grad_segments, self.info.module
        t0 = time.perf_counter()
        payloads = []
        for j in range(world):
            if j == rank:                 # this rank's own row never travels
                payloads.append(torch.empty(0, dtype=torch.uint8, device=input_tensor.device))
                continue
            views = layout.views(rows[j], segs)
            keys = [f"{n}>{j}" for n in layout.names(rows[j], segs, mod)]
            payloads.append(codec.encode(views, keys, owner.grad_coders, ledger=owner.ledger == "worker",
                                         min_size=owner.min_size).to(input_tensor.device))
        t1 = time.perf_counter()
        got, sent = owner.wire.all_to_all(payloads, group)
        t2 = time.perf_counter()
        acc = rows[rank].to(torch.float32, copy=True)      # this rank's own row, as it is
        for r in range(world):
            if r != rank:
                codec.add_into(got[r], layout.views(acc, segs))
        torch.div(acc, layout.divide_factor(self.info.group, op, world), out=output_tensor)
        owner.stats.record("reduce_scatter", sent=sent.bytes,
                           dense=reduce_scatter_bytes(input_tensor.numel() * input_tensor.element_size(), world),
                           comm_s=sent.comm_s, codec_s=(t1 - t0) + (time.perf_counter() - t2), link_s=sent.link_s)
        return None


class CompressedAllGather(_Comm, AllGather):
    """This rank's shard compressed, the packets all-gathered, every row decoded."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        owner, world = self.owner, group.size()
        if not input_tensor.is_floating_point():     # several dtypes packed as bytes (float8 extensions)
            return CountedAllGather(owner, self.info)(output_tensor, input_tensor, group, async_op)
        segs, mod = self.info.weight_segments, self.info.module
        t0 = time.perf_counter()
        views = layout.views(input_tensor, segs)
        payload = codec.encode(views, layout.names(input_tensor, segs, mod), owner.weight_coders, ledger=False,
                               min_size=owner.min_size)
        t1 = time.perf_counter()
        got, sent = owner.wire.all_gather(payload.to(input_tensor.device), group)
        t2 = time.perf_counter()
        rows = output_tensor.view(world, -1)
        for r in range(world):
            codec.decode_into(got[r], layout.views(rows[r], segs))
        owner.stats.record(self._gather_kind(), sent=sent.bytes,
                           dense=all_gather_bytes(input_tensor.numel() * input_tensor.element_size(), world),
                           comm_s=sent.comm_s, codec_s=(t1 - t0) + (time.perf_counter() - t2), link_s=sent.link_s)
        return None


class SilentReduceScatter(_Comm, ReduceScatter):
    """Sends nothing: this rank keeps its own row (what compute alone costs: the bench's floor)."""

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        output_tensor.copy_(layout.split_rows(input_tensor, group.size())[group.rank()])
        return None


class SilentAllGather(_Comm, AllGather):
    """Sends nothing: every row of the output is this rank's own shard."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        output_tensor.view(group.size(), -1).copy_(input_tensor.clone().view(1, -1))   # the input is a row of it
        return None


def send_nothing(state) -> None:
    """Replace every collective of `state`'s model by one that sends nothing (a probe of
    compute alone; the model no longer trains as one). `state.close()` undoes it."""
    for g in state.groups:
        g.fsdp_module.set_custom_reduce_scatter(SilentReduceScatter(state, g))
        g.fsdp_module.set_custom_all_gather(SilentAllGather(state, g))
