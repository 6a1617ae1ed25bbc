"""`compress`: milktea's collectives on every FSDP2 module of a model, and their state.

    state = milktea.fsdp.compress(model, Quantize(bits=8, chunk=256))   # after fully_shard
    ... train as usual ...
    state.stats.last          # StepTraffic(step 3: all_gather_forward 0.37 MB, ..., reduce_scatter 0.09 MB (3.94x fewer))
    state.memory(optimizer)   # bytes this rank holds: params, grads, optimizer, ledger
    state.state_dict()        # ledgers and random streams: a bit-identical resume
    state.close()             # FSDP2's own collectives again
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..distributed.protocols import Protocol
from . import choice, comms, hsdp, layout
from .exchange import Wire
from .stats import FSDPStats

STATE_FORMAT = 1


def compress(model, compressor=None, *, error_feedback=None, weights=None, min_size: int = 1024,
             link=None, replicate_group=None) -> "FSDPCompression":
    """Install milktea's collectives on every module of `model` that `fully_shard` was
    applied to (each layer and the root), on this rank; call it on every rank, after
    fully_shard and before the first forward. Returns the `FSDPCompression` state.

    compressor: how each rank's gradient chunk for another rank travels (Quantize(bits=8,
      chunk=256) is ZeRO++'s qgZ in int8; TopK, Sign, QSGD, Chain, a compressor of your own
      whose protocol is "allgather"), through an all-to-all; the receiver sums in float32.
      None: FSDP2's own reduce-scatter, only counted (the same result, bit for bit).
    error_feedback: None (follow the compressor, `milktea.ledger.use_ledger`'s rule: a ledger
      for a biased one, and before the reduce-scatter only when it drops much, see
      milktea.fsdp.choice), True (a ledger where the compressor runs), False (none),
      "worker" (before the reduce-scatter: (N-1)/N of the gradient per rank) or "shard"
      (HSDP: on the reduced shard).
    weights: how each rank's weight shard travels in the all-gathers of forward and backward
      (Quantize(bits=8, chunk=256): ZeRO++'s qwZ); None: FSDP2's own, counted.
    min_size: a parameter's piece with fewer entries travels as it is (biases, norms).
    link: a milktea.distributed.EmulatedLink that every collective waits for (a laptop's
      1 Gbit/s), FSDP2's own included.
    replicate_group: HSDP built from a 1-D shard mesh (`milktea.fsdp.hsdp_mesh`): the
      reduced shard is then averaged over this group by milktea, through `compressor`,
      and FSDP2's own reduce-scatter runs inside the shard group (the fast hop).
    """
    return FSDPCompression(model, compressor, error_feedback=error_feedback, weights=weights, min_size=min_size,
                           link=link, replicate_group=replicate_group)


class FSDPCompression:
    """milktea's collectives on one rank's FSDP2 model (see `compress`).

    stats: `FSDPStats`, bytes and seconds per step per collective. ledger: where error
    feedback keeps what was not sent (None, "worker", "shard"), `ledger_reason` why.
    """

    def __init__(self, model, compressor=None, *, error_feedback=None, weights=None, min_size: int = 1024,
                 link=None, replicate_group=None):
        from ..checks import check_int
        self.groups = layout.groups_of(model)
        self.model = model
        self.min_size = check_int(min_size, "min_size", 0)
        self.compressor = choice.check_compressor(
            compressor, "gradients", ("allgather", "allreduce", "lowrank") if replicate_group is not None
            else ("allgather", "allreduce"))
        self.weights = choice.check_compressor(weights, "weights")
        kinds = {layout.mesh_kind(g.group) for g in self.groups}
        if "ddp" in kinds:
            raise ValueError("a module is only replicated (fully_shard with a replicate-only mesh): nothing is "
                             "sharded, so there is no reduce-scatter to compress; use milktea.ddp for that")
        if "hsdp" in kinds and (compressor is not None or replicate_group is not None):
            raise ValueError("FSDP2's own HSDP (a 2-D replicate x shard mesh) all-reduces the replicate hop itself, "
                             "with no hook before it (set_all_reduce_hook runs after it), so that hop cannot be "
                             "compressed there. Build the model on the shard mesh alone and give milktea the "
                             "replicate group: shard_mesh, replicate_group = milktea.fsdp.hsdp_mesh(R, S); "
                             "fully_shard(..., mesh=shard_mesh); compress(model, c, replicate_group=replicate_group)")
        self.hsdp = replicate_group is not None
        self.ledger, self.ledger_reason = choice.ledger_for(self.compressor, error_feedback, hsdp=self.hsdp)
        self.wire = Wire(link)
        self.stats = FSDPStats()
        pg = self._shard_group()
        self.world, self.rank = dist.get_world_size(pg), dist.get_rank(pg)
        compress_rs = self.compressor is not None and not self.hsdp
        self.grad_coders = Protocol(self.compressor, self.ledger == "worker", self.rank, self.world) \
            if compress_rs else None
        self.weight_coders = Protocol(self.weights, False, self.rank, self.world) if self.weights is not None else None
        self.hop = hsdp.ReplicaHop(self, replicate_group) if self.hsdp else None
        self._saved = []
        for g in self.groups:     # through FSDP2's public setters (one parameter group per module)
            pgroup, mod = g.group, g.fsdp_module
            self._saved.append((g, pgroup._reduce_scatter_comm, pgroup._all_gather_comm, pgroup._all_reduce_hook,
                                pgroup.reduce_scatter_unused_params))
            mod.set_custom_reduce_scatter((comms.CompressedReduceScatter if compress_rs
                                           else comms.CountedReduceScatter)(self, g))
            mod.set_custom_all_gather((comms.CompressedAllGather if self.weights is not None
                                       else comms.CountedAllGather)(self, g))
            if compress_rs:      # every parameter in every reduce-scatter: one layout, one ledger each
                pgroup.reduce_scatter_unused_params = True
            if self.hop is not None:
                mod.set_all_reduce_hook(self.hop.hook_for(g))
            elif "hsdp" in kinds:
                mod.set_all_reduce_hook(hsdp.counter_for(self, g))
        self.closed = False

    def _shard_group(self):
        for g in self.groups:
            return g.group.mesh_info.shard_process_group
        return dist.group.WORLD

    # -- what a rank holds ---------------------------------------------------------------
    def ledger_bytes(self) -> int:
        """Bytes of error feedback's ledgers on this rank."""
        total = 0
        for coders in (self.grad_coders, self.hop.coders if self.hop is not None else None):
            if coders is not None:
                total += sum(led.residual.numel() * led.residual.element_size()
                             for led in coders.ledgers.values() if led.residual is not None)
        return total

    def memory(self, optimizer=None) -> dict:
        """Bytes this rank holds between steps: its weight shards ("params"), gradient shards
        ("grads"), the optimizer's state (given `optimizer`), error feedback ("ledger"), "total"."""
        def local(t):
            t = t.to_local() if hasattr(t, "to_local") else t
            return t.numel() * t.element_size()
        params = list(self.model.parameters())
        out = {"params": sum(local(p) for p in params),
               "grads": sum(local(p.grad) for p in params if p.grad is not None),
               "optimizer": 0, "ledger": self.ledger_bytes()}
        if optimizer is not None:
            out["optimizer"] = sum(local(v) for s in optimizer.state.values() for v in s.values()
                                   if isinstance(v, torch.Tensor) and v.dim() > 0)
        out["total"] = sum(out.values())
        return out

    # -- saving --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """This rank's ledgers and compressor copies (random streams included): what a
        resumed run needs to send the packets the uninterrupted one would have sent. Each
        rank saves its own (they differ); the model and optimizer are saved beside it."""
        return {"format": STATE_FORMAT, "rank": self.rank, "world": self.world, "ledger": self.ledger,
                "grads": self.grad_coders.state_dict() if self.grad_coders is not None else None,
                "weights": self.weight_coders.state_dict() if self.weight_coders is not None else None,
                "hop": self.hop.coders.state_dict() if self.hop is not None and self.hop.coders is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`'s output, saved by this same rank of a run of this world size."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a milktea.fsdp state (format {STATE_FORMAT}): pass what state_dict() returned")
        if (state["rank"], state["world"]) != (self.rank, self.world):
            raise ValueError(f"this state was saved by rank {state['rank']} of {state['world']}; this is rank "
                             f"{self.rank} of {self.world}: each rank loads its own (its ledgers are its own)")
        if state["ledger"] != self.ledger:
            raise ValueError(f"this state's ledger is {state['ledger']!r}, this run's is {self.ledger!r}: "
                             "compress with the same error_feedback")
        device = next(iter(self.model.parameters())).device
        for coders, saved in ((self.grad_coders, state["grads"]), (self.weight_coders, state["weights"]),
                              (self.hop.coders if self.hop is not None else None, state["hop"])):
            if (coders is None) != (saved is None):
                raise ValueError("this state was saved with other compressors: compress with the same ones")
            if coders is not None:
                coders.load_state_dict(saved, device)

    def close(self) -> None:
        """Give every module FSDP2's own collectives back (safe to call twice)."""
        for g, rs, ag, hook, unused in self._saved:
            g.fsdp_module.set_custom_reduce_scatter(rs)
            g.fsdp_module.set_custom_all_gather(ag)
            g.group._all_reduce_hook, g.group.reduce_scatter_unused_params = hook, unused
        self._saved, self.closed = [], True

    def __repr__(self) -> str:
        c = repr(self.compressor) if self.compressor is not None else "FSDP2's own"
        grads = (f"reduce-scatter: FSDP2's own; all-reduce over the replicas: {c}" if self.hsdp
                 else f"reduce-scatter: {c}" + (" per destination" if self.compressor is not None else ""))
        weights = repr(self.weights) if self.weights is not None else "FSDP2's own"
        return (f"FSDPCompression({grads}; all-gather: {weights}; ledger: {self.ledger}, {self.ledger_reason}; "
                f"{sum(1 for g in self.groups if g.weight_segments)} FSDP modules, rank {self.rank} of {self.world}"
                f"{', closed' if self.closed else ''})")
