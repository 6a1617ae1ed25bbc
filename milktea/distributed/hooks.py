"""milktea compressors as PyTorch DDP communication hooks.

    model = DDP(net)
    state = milktea.ddp.compress(model, TopK(ratio=0.01), error_feedback=True)
    ... train as usual ...
    state.stats.last                 # bytes, ratio, time in compress / communicate / decode
    milktea.ddp.save_checkpoint("ckpt", model, optimizer, state)   # one file per rank

DDP calls the hook once per gradient bucket as soon as that bucket is ready. The hook
hands the bucket to one communication thread per hooked model, which runs the buckets in
order on a process group of its own (created by `compress`, on every rank, in the same
order): its collectives can never interleave with DDP's, another model's, SyncBatchNorm's
or the user's, and compression overlaps the rest of the backward pass.

Each parameter is compressed on its own (as the simulator's `per_layer=True` and most
papers do), by the strategy its compressor declares (`compressor.protocol`, see
`milktea.distributed.protocols`), with its ledger and random stream keyed by its name:
bucketing (DDP's rebuild after the first step, static_graph's after the second,
bucket_cap_mb, a restored checkpoint) never loses or misplaces them.

Memory: besides the ledgers (error feedback: one float32 copy of each compressed
parameter), the hook keeps its all-gather's bytes in buffers reused every step (this
rank's packets, written where they are made, and one buffer per other rank: about N
times one rank's packets), so that a step allocates nothing of a packet's size; the
mean is decoded straight into DDP's bucket. `python -m milktea.bench memory` measures it.
"""
from __future__ import annotations

import atexit
import fnmatch
import queue
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as dist

from milktea import cost, trace
from milktea.distributed import protocols
from milktea.distributed.comm import Comm, default_timeout
from milktea.distributed.link import EmulatedLink
from milktea.distributed.momentum import MomentumCorrection
from milktea.distributed.stats import StatsLog
from milktea.checks import check_choice, check_int
from milktea.ledger import use_ledger

STATE_FORMAT = 2
#: policy="auto" compresses a bucket only where it is predicted this much faster than dense
AUTO_MARGIN = 0.2


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
    """How one bucket is sent: which slices are compressed (the bucket's parameters, in
    order), and the `Item`s the protocols get, made once and pointed at each step's buffer."""
    segments: list[Segment]
    decision: str | None = None      # "compress" / "dense" (auto policy)

    def __post_init__(self):
        self.compressed = [protocols.Item(s.name, None) for s in self.segments if s.compress]
        self.dense = [protocols.Item(s.name, None) for s in self.segments if not s.compress]
        self._at = [(s.offset, s.numel, s.shape) for s in self.segments if s.compress] + \
            [(s.offset, s.numel, s.shape) for s in self.segments if not s.compress]

    @property
    def names(self) -> tuple:
        return tuple(s.name for s in self.segments)

    def point(self, buf, used) -> None:
        """Point the items at this step's buffer; `used`: the names with a gradient this step."""
        for it, (offset, numel, shape) in zip(self.compressed + self.dense, self._at):
            it.tensor = buf.narrow(0, offset, numel).view(shape)
            it.used = it.name in used

    def release(self) -> None:
        """Let go of the buffer (a rebuilt bucket's old one is freed)."""
        for it in self.compressed + self.dense:
            it.tensor = None

    def items(self, buf, used) -> list[protocols.Item]:
        self.point(buf, used)
        return self.compressed


_LIVE: "weakref.WeakSet[CompressionState]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:   # no communication thread outlives the interpreter's own teardown
    for state in list(_LIVE):
        try:
            state.close(timeout=10)
        except RuntimeError:    # a thread stuck in a collective whose peer is gone: a daemon, left
            pass


class CompressionState:
    """The state of milktea's DDP hook in one process (see `milktea.ddp.compress`)."""

    def __init__(self, model, compressor=None, *, error_feedback: bool | None = None, min_size: int = 1024,
                 dense: Sequence[str] | Callable[[str], bool] = (), start_step: int = 1,
                 link: EmulatedLink | None = None, group=None, policy: str = "always",
                 model_link=None, keep_stats: int | None = None, momentum: float | None = None):
        from torch.nn.parallel import DistributedDataParallel as DDP
        if not isinstance(model, DDP):
            raise TypeError(f"model must be a torch DistributedDataParallel model, got {type(model).__name__}; "
                            "wrap it first: model = DDP(model)")
        if compressor is not None and not all(hasattr(compressor, m) for m in ("compress", "decompress", "fork")):
            raise TypeError(f"compressor must be a milktea compressor (e.g. TopK(ratio=0.01)), got "
                            f"{type(compressor).__name__}")
        self.start_step = check_int(start_step, "start_step", 0)
        self.min_size = check_int(min_size, "min_size", 0)
        check_choice(policy, ("always", "auto"), "policy")
        if callable(dense):
            self._dense_name = dense
        elif isinstance(dense, (list, tuple)) and all(isinstance(p, str) for p in dense):
            patterns = tuple(dense)
            self._dense_name = lambda n: any(fnmatch.fnmatchcase(n, p) for p in patterns)
        else:
            raise TypeError("dense must be a list of name patterns (e.g. ['*.bias', '*norm*']) or a "
                            f"function name -> bool, got {type(dense).__name__}")
        if policy == "auto" and model_link is None and link is None:
            raise ValueError("policy='auto' needs a link model: pass model_link=calibrate_link(...) "
                             "(or link=EmulatedLink(...))")
        self.compressor, self.policy = compressor, policy
        self.error_feedback = use_ledger(compressor, error_feedback)   # None: as the compressor is biased
        self.model_link = model_link if model_link is not None else (link.link if link else None)
        if group is None:   # a group of our own: collective, every rank calls compress() in the same order
            group = dist.new_group(dist.get_process_group_ranks(model.process_group), timeout=default_timeout())
            self._own_group = group
        else:
            self._own_group = None
        self.stats = StatsLog(keep=keep_stats)
        self.comm = Comm(group, link, self.stats)
        self.world, self.rank = self.comm.world, self.comm.rank
        self.protocol_name = protocols.protocol_of(compressor)
        self.protocol = (protocols.get(self.protocol_name)(compressor, error_feedback, self.rank, self.world)
                         if compressor is not None else None)
        self.dense = protocols.get("allreduce")(None, False, self.rank, self.world)   # plain averaging
        self.step = 0                                   # synchronised backward passes (saved)
        # momentum correction: every parameter's gradient replaced by its velocity, by name (saved)
        self.momentum = None if momentum is None else MomentumCorrection(model, momentum)
        self.plans: dict[tuple, BucketPlan] = {}        # keyed by the bucket's parameter names
        self.decisions: dict[tuple, dict] = {}          # the auto policy's reasons, per bucket
        named = list(model.module.named_parameters())
        self._names = {id(p): n for n, p in named}
        self._device = named[0][1].device
        # which parameters got a gradient since the last synchronised step (no_sync accumulates)
        self._used: set[str] = set()
        self._grad_hooks = [p.register_post_accumulate_grad_hook(self._mark_used(n))
                            for n, p in named if p.requires_grad]
        self._error: BaseException | None = None
        self._closed = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="milktea-comm", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _mark_used(self, name):
        def mark(_):
            self._used.add(name)
        return mark

    # --- the hook (DDP's thread) -----------------------------------------------------------
    def _plan(self, bucket) -> BucketPlan:
        segments, offset = [], 0
        for p in bucket.parameters():
            name = self._names[id(p)]
            ok = (p.numel() >= self.min_size and not self._dense_name(name)
                  and self.protocol.accepts(tuple(p.shape)))
            segments.append(Segment(name, offset, p.numel(), tuple(p.shape), ok))
            offset += p.numel()
        return BucketPlan(segments)

    def hook(self, bucket):  # no annotations: DDP checks them (registered as CompressionState.hook)
        """DDP's call for one gradient bucket: hand it to the communication thread; the
        returned torch.futures.Future is set when its mean is in place."""
        if self.momentum is not None:
            self.momentum.correct(bucket)
        buf, last = bucket.buffer(), bucket.is_last()
        step, plan, used = self.step, None, ()
        if self.protocol is not None and step >= self.start_step:
            key = tuple(map(id, bucket.parameters()))     # the parameters' identities: any rebuild is new
            plan = self.plans.get(key)
            if plan is None:
                plan = self.plans[key] = self._plan(bucket)
            used = set(self._used)
        cuda = buf.device.type == "cuda"
        fut = torch.futures.Future(devices=[buf.device] if cuda else None)
        ready = None
        if cuda:
            ready = torch.cuda.Event()
            ready.record()
        self._jobs.put((fut, buf, plan, step, last, used, ready))
        if last:
            self.step += 1
            self._used.clear()
        return fut

    # --- the communication thread ----------------------------------------------------------
    def _loop(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if isinstance(job, _Barrier):
                job.event.set()
                continue
            fut, buf, plan, step, last, used, ready = job
            if self._error is not None:  # collectives are out of step: refuse everything after
                fut.set_exception(RuntimeError(f"an earlier bucket failed: {self._error}"))
                continue
            try:
                if ready is not None:
                    torch.cuda.current_stream().wait_event(ready)
                self._send(buf, plan, step, used)
                if last:
                    self.stats.close_step()
                fut.set_result(buf)
            except BaseException as e:  # noqa: BLE001 - handed to DDP, raised in backward()
                self._error = e   # the original exception, for callers who want its type
                fut.set_exception(RuntimeError(
                    f"milktea hook on rank {self.rank}, step {step}: {type(e).__name__}: {e}"))

    def _send(self, buf, plan, step, used) -> None:
        """Average one bucket over the ranks, in place: its compressed parameters through the
        compressor's protocol, the others (small ones, those named in `dense`; the whole
        bucket before `start_step` or where `auto` keeps it dense) through the dense one.
        With MILKTEA_DEBUG=1, one line on stderr says which way it went (milktea.trace)."""
        if trace.ENABLED:
            with trace.bucket(step, self.rank):
                return self._average(buf, plan, step, used)
        self._average(buf, plan, step, used)

    def _average(self, buf, plan, step, used) -> None:
        nbytes = buf.numel() * buf.element_size()
        if plan is None or (self.policy == "auto" and self._decide(plan, buf, step) == "dense"):
            self.stats.add(step, dense_bytes=nbytes, buckets=1)
            self.dense.run(self.comm, [protocols.Item("bucket", buf)], step)
            return
        self.stats.add(step, dense_bytes=nbytes, buckets=1, compressed=True)
        plan.point(buf, used)
        try:
            if plan.dense:
                self.dense.run(self.comm, plan.dense, step)
            if plan.compressed:
                self.protocol.run(self.comm, plan.compressed, step)
        finally:
            plan.release()

    def _decide(self, plan, buf, step) -> str:
        """"compress" or "dense" for this bucket under policy="auto", decided at a bucket's
        first compressed step. Every rank times its protocol on
        the real gradients (`Protocol.probe`: compress, decode N packets, on a copy of the
        compressor; the faster of two tries, so a cold cache does not decide) and prices
        both ways with the link model; the ranks agree on the slowest rank's figures (one
        tiny all-reduce), so all take the same decision. The bucket is compressed when

            dense all-reduce time  >  (1 + AUTO_MARGIN) * (codec time + compressed collectives)

        On a fast link (loopback) the codec costs more than it saves: everything stays dense."""
        if plan.decision is None:
            tensors = [it.tensor.clone() for it in plan.items(buf, used=())]
            plan.release()
            codec_s, comm_s = self.protocol.probe_agreed(self.comm, tensors, self.model_link, step)
            nbytes = sum(s.numel for s in plan.segments if s.compress) * buf.element_size()
            dense_s = cost.ring_allreduce_time(nbytes, self.world, self.model_link)
            plan.decision = "compress" if dense_s > (1 + AUTO_MARGIN) * (codec_s + comm_s) else "dense"
            self.decisions[plan.names] = dict(bucket=len(self.decisions), params=len(plan.segments),
                                              decision=plan.decision, dense_s=dense_s, codec_s=codec_s,
                                              compressed_comm_s=comm_s, bytes=nbytes)
        return plan.decision

    @property
    def error(self) -> BaseException | None:
        """The exception that broke the hook (DDP re-raises it as a RuntimeError), or None."""
        return self._error

    def close(self, timeout: float = 60.0) -> None:
        """Stop and join the communication thread (after the buckets handed to it), then
        release the hook's process group and gradient hooks (the model then needs a new
        hook). Safe to call twice. Call it before destroy_process_group()."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"milktea's communication thread on rank {self.rank} is still inside a "
                               f"collective after {timeout} s: another rank has stopped or hangs")
        for h in self._grad_hooks:
            h.remove()
        if self._own_group is not None and dist.is_initialized():
            try:
                dist.destroy_process_group(self._own_group)
            except (RuntimeError, ValueError):   # already gone with the default group
                pass
        _LIVE.discard(self)

    # --- saving and restoring --------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume bit for bit: the step, and per parameter name its
        ledger, compressor state and random generators. Records this rank and world size."""
        self._drain()
        return {"format": STATE_FORMAT, "rank": self.rank, "world": self.world, "step": self.step,
                "protocol": self.protocol_name, "compressor": repr(self.compressor),
                "error_feedback": self.error_feedback,
                "params": self.protocol.state_dict() if self.protocol is not None else None,
                "momentum": self.momentum.state_dict() if self.momentum is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict()` returned on the same rank of a run of the same size."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("load_state_dict expects what CompressionState.state_dict() returned "
                             f"(format {STATE_FORMAT})")
        if state["rank"] != self.rank or state["world"] != self.world:
            raise ValueError(f"this hook state was saved by rank {state['rank']} of {state['world']}; this is "
                             f"rank {self.rank} of {self.world}. Each rank loads its own file: use "
                             "milktea.ddp.save_checkpoint / load_checkpoint")
        if state["protocol"] != self.protocol_name or state["error_feedback"] != self.error_feedback:
            raise ValueError(f"this hook state is for {state['compressor']} (error_feedback="
                             f"{state['error_feedback']}); this hook runs {self.compressor!r} "
                             f"(error_feedback={self.error_feedback})")
        if (state.get("momentum") is None) != (self.momentum is None):
            raise ValueError(f"this hook state was saved {'without' if state.get('momentum') is None else 'with'} "
                             f"momentum correction; build the hook with the same momentum= option")
        self._drain()
        self.step = int(state["step"])
        self._used.clear()
        if self.protocol is not None:
            self.protocol.load_state_dict(state["params"], device=self._device)
        if self.momentum is not None:
            self.momentum.load_state_dict(state["momentum"], device=self._device)

    def _drain(self) -> None:
        """Wait until the communication thread has finished every bucket handed to it."""
        if self._closed or not self._thread.is_alive():
            return
        done = threading.Event()
        self._jobs.put(_Barrier(done))
        done.wait()

    def __repr__(self) -> str:
        link = f", link={self.comm.link!r}" if self.comm.link is not None else ""
        return (f"CompressionState({self.compressor!r}, error_feedback={self.error_feedback}, "
                f"protocol={self.protocol_name}, policy={self.policy}, step={self.step}, "
                f"rank={self.rank}/{self.world}{link}, {len(self.plans)} buckets planned)")


class _Barrier:
    def __init__(self, event):
        self.event = event


def compress(model, compressor=None, error_feedback: bool | None = None, **options) -> CompressionState:
    """Register `compressor` on DDP `model` as a communication hook; return its state.
    error_feedback: None (default) gives a ledger to a compressor that is `biased` (Top-K,
    Sign, PowerSGD, ...) and none to an unbiased one (QSGD, TernGrad, Cast): see
    `milktea.ledger.use_ledger`; True or False decides.

    Call it on every rank, in the same order (it creates the hook's own process group).
    compressor=None sends the gradient dense (all-reduce), through the same code path.
    Options: min_size (params with fewer elements stay dense, default 1024), dense (name
    patterns or a function: these stay dense), start_step (dense before it, default 1),
    link (an EmulatedLink), group (a process group to use instead of a new one), policy
    ("always", or "auto": compress a bucket only where the model_link cost model says it
    pays), keep_stats (how many steps of statistics to keep), momentum (momentum correction:
    each parameter's gradient becomes this rank's velocity u <- m u + g before anything else,
    saved with the state; train with an optimizer without momentum, see
    `milktea.distributed.momentum`).

    >>> state = compress(ddp_model, TopK(ratio=0.01), error_feedback=True)  # doctest: +SKIP
    """
    state = CompressionState(model, compressor, error_feedback=error_feedback, **options)
    model.register_comm_hook(state, CompressionState.hook)
    return state
