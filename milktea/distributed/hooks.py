"""milktea compressors as PyTorch DDP communication hooks.

    model = DDP(net)
    state = milktea.ddp.compress(model, TopK(ratio=0.01), error_feedback=True)
    ... train as usual ...
    state.stats.last                 # bytes, ratio, time in compress / communicate / decode
    torch.save({"model": net.state_dict(), "hook": state.state_dict()}, "ckpt.pt")

DDP calls the hook once per gradient bucket as soon as that bucket is ready, so
compression overlaps the rest of the backward pass. The hook hands the bucket to one
communication thread per process, which runs the buckets strictly in order: every rank
then issues the same collectives in the same order (chained collectives issued from
callbacks could interleave differently on different ranks), and the link is used one
collective at a time, as a real wire is.
"""
from __future__ import annotations

import copy
import fnmatch
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from milktea.distributed import families
from milktea.distributed.comm import Comm
from milktea.distributed.link import EmulatedLink
from milktea.distributed.stats import StatsLog


@dataclass
class Segment:
    """One parameter's slice of a bucket's flat buffer."""
    name: str
    offset: int
    numel: int
    shape: tuple
    compress: bool


@dataclass
class BucketPlan:
    """How one bucket is sent: which slices are compressed, and their per-bucket state."""
    index: int
    numel: int
    segments: list[Segment]
    family: str
    sender: object = None                       # compressor or ErrorFeedback (gather/cast families)
    powersgd: list = field(default_factory=list)   # one PowerSGD per compressed matrix
    residuals: list = field(default_factory=list)  # PowerSGD error feedback, one per matrix
    decision: str | None = None                 # "compress" / "dense" (auto policy)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.segments]

    @property
    def all_compressed(self) -> bool:
        return all(s.compress for s in self.segments)


def _check_int(name, v, low):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < low:
        raise ValueError(f"{name} must be >= {low}, got {v}")
    return v


class CompressionState:
    """The state of milktea's DDP hook in one process (see `milktea.ddp.compress`)."""

    def __init__(self, model, compressor=None, *, error_feedback: bool = False, min_size: int = 1024,
                 dense: Sequence[str] | Callable[[str], bool] = (), start_step: int = 1,
                 link: EmulatedLink | None = None, group=None, policy: str = "always",
                 model_link=None, keep_stats: int | None = None):
        from torch.nn.parallel import DistributedDataParallel as DDP
        if not isinstance(model, DDP):
            raise TypeError(f"model must be a torch DistributedDataParallel model, got {type(model).__name__}; "
                            "wrap it first: model = DDP(model)")
        if compressor is not None and not all(hasattr(compressor, m) for m in ("compress", "decompress", "aggregate")):
            raise TypeError(f"compressor must be a milktea compressor (e.g. TopK(ratio=0.01)), got "
                            f"{type(compressor).__name__}")
        self.start_step = _check_int("start_step", start_step, 1)
        self.min_size = _check_int("min_size", min_size, 0)
        if policy not in ("always", "auto"):
            raise ValueError(f"policy must be 'always' or 'auto', not {policy!r}")
        if callable(dense):
            self._dense_name = dense
        elif isinstance(dense, (list, tuple)) and all(isinstance(p, str) for p in dense):
            patterns = tuple(dense)
            self._dense_name = lambda n: any(fnmatch.fnmatchcase(n, p) for p in patterns)
        else:
            raise TypeError("dense must be a list of name patterns (e.g. ['*.bias', '*norm*']) or a "
                            f"function name -> bool, got {type(dense).__name__}")
        self.compressor, self.error_feedback, self.policy = compressor, bool(error_feedback), policy
        self.family = families.family_of(compressor)
        if policy == "auto" and model_link is None and link is None:
            raise ValueError("policy='auto' needs a link model: pass model_link=calibrate_link(...) "
                             "(or link=EmulatedLink(...))")
        self.model_link = model_link if model_link is not None else (link.link if link else None)
        self.stats = StatsLog(keep=keep_stats)
        self.comm = Comm(group, link, self.stats)
        self.world = self.comm.world
        self.step = 0            # backward passes so far (saved and restored)
        self._ddp_steps = 0      # backward passes of this DDP object (buckets settle after the first)
        self.plans: dict[int, BucketPlan] = {}
        self.decisions: dict[int, dict] = {}   # the auto policy's reasons, per bucket
        self._pending: dict[int, dict] = {}
        self._names = {id(p): n for n, p in model.module.named_parameters()}
        self._device = next(model.module.parameters()).device
        self._error: BaseException | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="milktea-comm", daemon=True)
        self._thread.start()

    # --- the hook -------------------------------------------------------------------------
    def _plan(self, bucket) -> BucketPlan:
        segments, offset = [], 0
        for p in bucket.parameters():
            name = self._names.get(id(p), f"param{offset}")
            ok = p.numel() >= self.min_size and not self._dense_name(name)
            if self.family == "powersgd":
                ok = ok and p.dim() >= 2
            segments.append(Segment(name, offset, p.numel(), tuple(p.shape), ok))
            offset += p.numel()
        plan = BucketPlan(bucket.index(), offset, segments, self.family)
        families.init_plan(self, plan)
        saved = self._pending.pop(plan.index, None)
        if saved is not None:
            if saved["names"] != plan.names:
                raise ValueError(f"saved hook state for bucket {plan.index} holds {saved['names'][:3]}..., "
                                 f"this model's bucket holds {plan.names[:3]}...: load it into the same model "
                                 "with the same bucket_cap_mb")
            families.load_plan(self, plan, saved)
        return plan

    def hook(self, bucket) -> torch.futures.Future:
        buf, index, last = bucket.buffer(), bucket.index(), bucket.is_last()
        step = self.step
        plan = None
        if self.family != "dense" and self._ddp_steps >= 1 and step >= self.start_step:
            plan = self.plans.get(index)
            if plan is None or plan.numel != buf.numel():
                plan = self.plans[index] = self._plan(bucket)
        cuda = buf.device.type == "cuda"
        fut = torch.futures.Future(devices=[buf.device] if cuda else None)
        ready = None
        if cuda:
            ready = torch.cuda.Event()
            ready.record()
        self._jobs.put((fut, buf, plan, step, last, ready))
        if last:
            self.step += 1
            self._ddp_steps += 1
        return fut

    # --- the communication thread ----------------------------------------------------------
    def _loop(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, buf, plan, step, last, ready = job
            if self._error is not None:  # collectives are out of step: refuse everything after
                fut.set_exception(RuntimeError(f"an earlier bucket failed: {self._error}"))
                continue
            try:
                if ready is not None:
                    torch.cuda.current_stream().wait_event(ready)
                self.stats.add(step, dense_bytes=buf.numel() * buf.element_size(), buckets=1)
                if plan is None or families.decide(self, plan, buf, step) == "dense":
                    families.run_dense(self, buf, step)
                else:
                    self.stats.add(step, compressed=True)
                    families.RUN[plan.family](self, plan, buf, step)
                if last:
                    self.stats.close_step()
                fut.set_result(buf)
            except BaseException as e:  # noqa: BLE001 - handed to DDP, raised in backward()
                self._error = e   # the original exception, for callers who want its type
                index = plan.index if plan is not None else "?"
                fut.set_exception(RuntimeError(
                    f"milktea hook on rank {self.comm.rank}, step {step}, bucket {index}: "
                    f"{type(e).__name__}: {e}"))

    @property
    def error(self) -> BaseException | None:
        """The exception that broke the hook (DDP re-raises it as a RuntimeError), or None."""
        return self._error

    def close(self) -> None:
        """Stop the communication thread (the model then needs a new hook)."""
        self._jobs.put(None)
        self._thread.join(timeout=10)

    # --- saving and restoring --------------------------------------------------------------
    def state_dict(self) -> dict:
        """Step counter and every bucket's ledger (residuals) and compressor state."""
        out = {"step": self.step, "buckets": {}}
        for i, plan in self.plans.items():
            out["buckets"][i] = {"names": plan.names, **families.save_plan(self, plan)}
        for i, saved in self._pending.items():  # loaded but not used yet: keep it
            out["buckets"].setdefault(i, saved)
        return copy.deepcopy(out)

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict()` returned. Buckets pick up their state the first
        time they are compressed (after DDP has settled its buckets)."""
        if not isinstance(state, dict) or "step" not in state or "buckets" not in state:
            raise ValueError("load_state_dict expects what CompressionState.state_dict() returned")
        self.step = int(state["step"])
        self.plans.clear()
        self._pending = copy.deepcopy(dict(state["buckets"]))

    def __repr__(self) -> str:
        link = f", link={self.comm.link!r}" if self.comm.link is not None else ""
        return (f"CompressionState({self.compressor!r}, error_feedback={self.error_feedback}, "
                f"family={self.family}, policy={self.policy}, step={self.step}, world={self.world}"
                f"{link}, {len(self.plans)} buckets planned)")


def _hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
    return state.hook(bucket)


def compress(model, compressor=None, error_feedback: bool = False, **options) -> CompressionState:
    """Register `compressor` on DDP `model` as a communication hook; return its state.

    compressor=None sends the gradient dense (all-reduce), through the same code path.
    Options: min_size (params with fewer elements stay dense, default 1024), dense (name
    patterns or a function: these stay dense), start_step (dense before it; >= 1 since
    DDP rebuilds its buckets after the first step), link (an EmulatedLink), group,
    policy ("always", or "auto": compress a bucket only where the model_link cost model
    says it pays), keep_stats (how many steps of statistics to keep).

    >>> state = compress(ddp_model, TopK(ratio=0.01), error_feedback=True)  # doctest: +SKIP
    """
    state = CompressionState(model, compressor, error_feedback=error_feedback, **options)
    model.register_comm_hook(state, _hook)
    return state

