"""N workers in one process: each with its own data shard and its own ledger, averaged the
way the real collective would. Enough to study convergence at N=64 on a laptop.

    >>> from milktea.compressors import TopK
    >>> hist = simulate(Digits(), TopK(ratio=0.01), workers=16, steps=150, progress=False)
    >>> hist.final("accuracy") > 0.88
    True

All workers' gradients come from one batched call (torch.func: vmap over the workers of
grad of the per-worker loss); the compressor encodes them as the rows of one matrix
(`Compressor.encode`, one packet per worker, through one ledger of W rows), and the step
applies the codec's mean of the packets (`decode_mean`).
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import asdict, dataclass, field

import torch
from torch.func import functional_call, grad, vmap

from .checks import check_grad, check_int, check_number
from .compressors import Compressor
from .device import pick_device
from .distributed import protocols
from .distributed.compressed_allreduce import CompressedAllReduce, simulate_round
from .feedback import ErrorFeedback
from .ledger import Ledger, use_ledger
from .onebit import OneBitAdam
from .tasks import Digits, Quadratic, Task  # noqa: F401  (Digits: for the examples)


@dataclass
class History:
    """What one simulated run did. `loss[t]`: the workers' mean minibatch loss before step t;
    `evals[name][i]`: held-out metric after `eval_steps[i]` steps; `bytes_sent[t][w]`: the
    real wire bytes (`packet.nbytes`) worker w sent at step t; `dense_bytes`: one
    uncompressed gradient."""
    task: str
    scheme: str
    workers: int
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: dict[str, list[float]] = field(default_factory=dict)
    bytes_sent: list[list[int]] = field(default_factory=list)
    dense_bytes: int = 0
    wall_time: float = 0.0
    diverged_at: int | None = None
    config: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.loss)

    @property
    def bytes_per_worker(self) -> list[float]:
        """Mean wire bytes per worker, one value per step."""
        return [sum(b) / len(b) for b in self.bytes_sent]

    @property
    def total_bytes(self) -> int:
        return sum(sum(b) for b in self.bytes_sent)

    @property
    def ratio(self) -> float:
        """Compression ratio R = dense bytes / wire bytes, over the whole run."""
        sent = self.total_bytes
        return self.dense_bytes * self.steps * self.workers / sent if sent else math.nan

    def final(self, metric: str = "loss") -> float:
        """The last held-out value of `metric` (e.g. "accuracy", "loss", "error")."""
        if metric not in self.evals:
            raise KeyError(f"no metric {metric!r}; this run has {sorted(self.evals)}")
        return self.evals[metric][-1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(steps=self.steps, ratio=self.ratio)
        return d

    def __repr__(self) -> str:
        from . import i18n
        from .tables import word
        sep = i18n._(", ")
        parts = [i18n._("{name} {value:.4g}").format(name=i18n._(k), value=v[-1]) if k != "accuracy"
                 else i18n._("accuracy {value:.1%}").format(value=v[-1]) for k, v in self.evals.items() if v]
        ratio = sep + i18n._("R={ratio:.1f}x").format(ratio=self.ratio) if self.bytes_sent else ""
        div = sep + i18n._("DIVERGED at step {step}").format(step=self.diverged_at) if self.diverged_at is not None else ""
        head = i18n._("{task}, {scheme}, {workers} workers, {steps} steps: ").format(
            task=self.task, scheme=word(str(self.scheme)), workers=self.workers, steps=self.steps)
        tail = i18n._("{seconds:.2f} s").format(seconds=self.wall_time)
        return f"History({head}{sep.join(parts)}{ratio}{sep}{tail}{div})"


def _check(task, compressor, workers, steps, lr, batch, momentum, seed, eval_every):
    if not isinstance(task, Task):
        raise TypeError(f"task must be a milktea.tasks.Task (e.g. Digits() or Quadratic()), got {type(task).__name__}")
    if compressor is not None and not isinstance(compressor, (Compressor, ErrorFeedback)):
        raise TypeError(f"compressor must be a milktea Compressor (e.g. TopK(ratio=0.01)) or a ledger "
                        f"(ErrorFeedback, DGC), got {type(compressor).__name__}")
    for name, v, low in (("workers", workers, 1), ("steps", steps, 1), ("seed", seed, 0), ("eval_every", eval_every, 1)):
        check_int(v, name, low)
    if batch is not None:   # None: each worker's whole shard
        check_int(batch, "batch", 1)
    if not callable(lr):     # a schedule (step -> learning rate) is checked as it is used
        check_number(lr, "lr", 0, open_low=True)
    check_number(momentum, "momentum", 0, 1, open_high=True)


def _stack_shards(shards, device):
    """Pad the per-worker shards to one [W, L, ...] tensor plus a [W, L] validity mask."""
    L = max(len(y) for _, y in shards)
    xs, ys, valid = [], [], torch.zeros(len(shards), L, dtype=torch.bool)
    for w, (x, y) in enumerate(shards):
        pad = L - len(y)
        xs.append(torch.cat([x, x[:1].expand(pad, *x.shape[1:])]) if pad else x)
        ys.append(torch.cat([y, y[:1].expand(pad, *y.shape[1:])]) if pad else y)
        valid[w, :len(y)] = True
    return torch.stack(xs).to(device), torch.stack(ys).to(device), valid.to(device)


class _Exchange:
    """What the collective does with one step's gradients G [workers, params]: every worker
    compresses each of its streams (one flat bucket, or one per parameter tensor); returns
    the average update and each worker's wire bytes.

    `batched`: one `encode` of the W workers' rows per stream, with one ledger of W rows
    (row w rounds as worker w's own fork would; a ready-made ledger that steps W workers at
    once, `compress_rows`, the same); else one call per worker, each with its own fork and
    ledger: the same bits (tests/unit/test_batched.py). With EF21 (milktea.ef21) head office
    keeps a running estimate and adds each round's mean to it."""

    def __init__(self, compressor, error_feedback, workers, named, flat, per_layer, batched=True):
        self.workers, self.flat = workers, flat
        ready = isinstance(compressor, ErrorFeedback)     # a ready-made ledger (e.g. DGC): one per worker
        self.codec = compressor.compressor if ready else compressor
        if compressor is None:
            self.scheme = "dense"
        else:
            self.scheme = compressor.name if ready else compressor.name + ("+ef" if error_feedback else "")
        # a protocol that sums on the way (PowerSGD's factors): one sender on the summed gradient
        self.summed = compressor is not None and protocols.get(protocols.protocol_of(self.codec)).summed
        self.per_layer = self.summed if per_layer is None else bool(per_layer)
        self.streams, offset = [], 0            # (slice of the flat vector, shape) per packet
        for _, p in (named if self.per_layer else [("all", flat)]):
            self.streams.append((slice(offset, offset + p.numel()), tuple(p.shape)))
            offset += p.numel()
        self.ready, self.error_feedback = ready, bool(error_feedback) and not ready
        self.batched = bool(batched) and not self.summed and (not ready or hasattr(compressor, "compress_rows"))
        senders = 1 if self.batched or self.summed else workers
        streams = range(len(self.streams))
        self.coders = self.ledgers = self.estimates = None
        if ready:       # each worker's own copy of the ledger, its compressor with its own stream
            self.coders = [[_ledger_fork(compressor, w, s) for s in streams] for w in range(senders)]
            if getattr(compressor, "accumulates", False):
                self.estimates = [torch.zeros(part.stop - part.start, dtype=flat.dtype, device=flat.device)
                                  for part, _ in self.streams]
        elif compressor is not None:            # one state (and random stream) per worker stream
            self.coders = [[compressor.fork(w, s) for s in streams] for w in range(senders)]
            self.ledgers = [[Ledger() for _ in streams] for _ in range(senders)]

    def __call__(self, G):
        W = self.workers
        update, sent = torch.empty_like(self.flat), [0] * W
        for s, (part, shape) in enumerate(self.streams):
            g = G[:, part].reshape(W, *shape)
            out = update[part].view(shape)
            if self.summed:
                coder, total = self.coders[0][s], g.sum(0)
                packet = self.ledgers[0][s].step(coder, total) if self.error_feedback else coder.compress(total)
                self.codec.decompress(packet, out=out).div_(W)
                sent = [a + packet.nbytes for a in sent]
                continue
            if self.ready:
                packets = (self.coders[0][s].compress_rows(g) if self.batched
                           else [self.coders[w][s].compress(g[w]) for w in range(W)])
            elif self.batched:
                coder = self.coders[0][s]
                packets = (self.ledgers[0][s].step_rows(coder, g) if self.error_feedback
                           else coder.encode(check_grad(g, "gradient", coder.nonfinite))[0])
            elif self.error_feedback:
                packets = [self.ledgers[w][s].step(self.coders[w][s], g[w]) for w in range(W)]
            else:
                packets = [self.coders[w][s].compress(g[w]) for w in range(W)]
            self.codec.decode_mean(packets, out)
            if self.estimates is not None:
                out.view(-1).copy_(self.estimates[s].add_(out.view(-1)))
            sent = [a + p.nbytes for a, p in zip(sent, packets)]
        return update, sent


def _ledger_fork(ledger: ErrorFeedback, rank: int, stream: int) -> ErrorFeedback:
    """A copy of a ready-made ledger for worker `rank`'s stream `stream`: its own state, its
    compressor forked (its own random stream, as the library's forks give each worker)."""
    twin = copy.deepcopy(ledger)
    twin.compressor = ledger.compressor.fork(rank, stream)
    return twin


class _CompressedAllReduce:
    """The compressed all-reduce (milktea.distributed.compressed_allreduce) for all workers
    at once: each worker's flat gradient is split into N chunks, chunk j compressed for
    worker j, averaged and compressed again there, and the results gathered; ledgers on
    both sides. A worker's `sent` bytes are its N chunk packets (its compressed gradient;
    the wire carries about 2(N-1)/N of that, as a ring all-reduce does)."""

    def __init__(self, compressor, error_feedback, workers, flat):
        if compressor is None or isinstance(compressor, ErrorFeedback):
            raise TypeError("protocol='compressed_allreduce' needs a plain compressor (e.g. Sign()); it keeps "
                            "its own ledgers on both sides (error_feedback=True)")
        self.workers, self.flat, self.codec, self.per_layer = workers, flat, compressor, False
        self.scheme = compressor.name + ("+ef2" if error_feedback else "") + "/car"
        self.ranks = [CompressedAllReduce(compressor, w, workers, error_feedback=error_feedback)
                      for w in range(workers)]

    def __call__(self, G):
        update = simulate_round(self.ranks, list(G)).to(self.flat.dtype)
        return update, [sum(p.nbytes for p in r.last[0]) for r in self.ranks]


#: the protocols `simulate(protocol=...)` can impose on any compressor: those whose packets
#: are each rank's own (all-gathered) or chunked and reduced (the compressed all-reduce); a
#: compressor's own protocol is always simulated (PowerSGD's factors, summed on the way)
PROTOCOLS = tuple(name for name, cls in protocols.PROTOCOLS.items()
                  if cls.collective in ("allgather", "compressed_allreduce") and not cls.summed)


def _rate(schedule, step: int) -> float:
    rate = schedule(step)
    check_number(rate, "lr(step)", 0)
    return rate


def simulate(task: Task, compressor=None, *, workers: int = 8, steps: int = 200, lr: float = 0.1,
             batch: int | None = 32, error_feedback: bool | None = None, momentum: float = 0.0, seed: int = 0,
             device=None, progress: bool = True, eval_every: int = 10, per_layer: bool | None = None,
             protocol: str | None = None, batched: bool = True, optimizer=None) -> History:
    """Train `task` with `workers` simulated workers for `steps` SGD steps.

    Each step every worker draws `batch` examples from its own shard (without replacement;
    None = its whole shard), computes its gradient, and sends one packet: its compressor's
    `compress` of the flat gradient, through its own `ErrorFeedback` ledger when
    `error_feedback` is on (None, the default: when the compressor is `biased`, as
    everywhere in the library: `milktea.ledger.use_ledger`). A ledger can also be passed as
    `compressor` (e.g. `DGC(...)`): each worker then gets its own copy of it; with `EF21(...)`
    (milktea.ef21) head office adds each round's average to its running estimate of the
    gradient and steps along that. Otherwise the update is the average of what the collective delivers,
    `compressor.aggregate(packets) / workers`, with optional heavy-ball `momentum` applied
    to that average (as torch.optim.SGD does after a DDP all-reduce). `compressor=None` is
    dense SGD. Evaluates on the task's held-out data at step 0, every `eval_every` steps and
    at the end. A non-finite loss stops the run with a warning (`History.diverged_at`).

    `per_layer`: compress each parameter tensor on its own (as many packets per worker as
    tensors) instead of one flat bucket; the default is per layer for PowerSGD (which needs
    matrices), one bucket otherwise. PowerSGD's two all-reduces sum the workers' factors on
    the way, so its packet is that of the summed gradient (with one ledger on the sum: only
    the sum of the workers' residuals ever reaches the update).

    `protocol`: how the packets travel. None or "allgather": every worker's packet reaches
    every worker (today's collective for sparse and quantized packets).
    "compressed_allreduce": each worker compresses chunk j of its gradient for worker j,
    which averages and compresses it again; ledgers on both sides (see
    milktea.distributed.compressed_allreduce). Bytes per worker then stay flat in N.

    `batched`: encode all workers' gradients in one call, as the rows of one matrix
    (`Compressor.encode`; row w rounds as worker w's own copy would), bit for bit what one
    call per worker gives; False: one worker at a time.

    `lr`: a number, or a schedule: a function of the step (0, 1, ...) returning the learning
    rate of that step (a learning-rate warm-up, say).

    `optimizer`: instead of SGD on the averaged gradient, an optimizer that does its own
    exchange: `milktea.onebit.OneBitAdam(...)` (Adam, then 1-bit momentum through the
    compressed all-reduce). It takes the place of `compressor`, `lr` and `momentum`.

    >>> simulate(Quadratic(100), workers=2, steps=40, progress=False).final("error") < 1
    True
    """
    _check(task, compressor, workers, steps, lr, batch, momentum, seed, eval_every)
    if optimizer is not None:
        if not isinstance(optimizer, OneBitAdam):
            raise TypeError(f"optimizer must be a milktea.onebit.OneBitAdam, got {type(optimizer).__name__}")
        if compressor is not None or momentum:
            raise ValueError("with an optimizer, leave compressor=None and momentum=0: 1-bit Adam compresses "
                             "its own momentum (OneBitAdam(compressor=...))")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be None or one of {PROTOCOLS}, got {protocol!r}")
    from tqdm.auto import tqdm
    device = pick_device(device, name="device")
    # a ready-made ledger (ErrorFeedback, DGC) is error feedback; else the library's one default
    error_feedback = True if isinstance(compressor, ErrorFeedback) else use_ledger(compressor, error_feedback)

    model = task.model().to(device)
    named = list(model.named_parameters())
    flat = torch.cat([p.detach().reshape(-1) for _, p in named])
    params, offset = {}, 0
    for name, p in named:
        params[name] = flat[offset:offset + p.numel()].view_as(p)
        p.data = params[name]                   # the module reads the flat vector (for evaluate)
        offset += p.numel()
    buffers = {n: b for n, b in model.named_buffers()}

    def worker_loss(params, x, y, weight):
        per_example = task.loss(functional_call(model, (params, buffers), (x,)), y)
        loss = (per_example * weight).sum() / weight.sum()
        return loss, loss.detach()

    grads_of = vmap(grad(worker_loss, has_aux=True), in_dims=(None, 0, 0, 0))
    X, Y, valid = _stack_shards(task.shards(workers), device)
    counts = valid.sum(1)
    L = X.shape[1]
    B = L if batch is None else min(batch, L)
    gen = torch.Generator().manual_seed(seed)
    rows = torch.arange(workers, device=device)[:, None]

    if protocol is None and compressor is not None and optimizer is None:
        own = protocols.protocol_of(compressor)
        protocol = own if protocols.get(own).collective == "compressed_allreduce" else None
    if protocol is not None and protocols.get(protocol).collective == "compressed_allreduce":
        exchange = _CompressedAllReduce(compressor, error_feedback, workers, flat)
    else:
        exchange = _Exchange(compressor, error_feedback, workers, named, flat, per_layer, batched)
    scheme = exchange.scheme if optimizer is None else optimizer.name
    opt_state = optimizer.start(flat, workers) if optimizer is not None else None
    dense_bytes = flat.numel() * flat.element_size()
    hist = History(task.name, scheme, workers, dense_bytes=dense_bytes, config=dict(
        steps=steps, lr=lr, batch=batch, error_feedback=error_feedback and compressor is not None,
        momentum=momentum, seed=seed, device=str(device), task=repr(task), params=flat.numel(),
        protocol=protocol or "allgather",
        per_layer=exchange.per_layer, compressor=repr(compressor), optimizer=repr(optimizer)))
    velocity = torch.zeros_like(flat) if momentum else None

    def evaluate(step):
        hist.eval_steps.append(step)
        for k, v in task.evaluate(model).items():
            hist.evals.setdefault(k, []).append(v)

    evaluate(0)
    start = time.perf_counter()
    bar = tqdm(range(steps), desc=f"{task.name} {scheme}", disable=not progress, leave=False)
    for t in bar:
        if B == L:
            xb, yb, wb = X, Y, valid
        else:
            keys = torch.rand(workers, L, generator=gen).to(device).masked_fill_(~valid, 2.0)
            idx = keys.argsort(1)[:, :B]
            xb, yb, wb = X[rows, idx], Y[rows, idx], idx < counts[:, None]
        g, losses = grads_of(params, xb, yb, wb.to(flat.dtype))
        G = torch.cat([g[name].reshape(workers, -1) for name, _ in named], dim=1)
        loss = losses.mean().item()
        if not math.isfinite(loss):
            hist.diverged_at = t
            warnings.warn(f"{scheme}: the loss became {loss} at step {t}; stopped (try a smaller lr)", stacklevel=2)
            break
        hist.loss.append(loss)
        if opt_state is not None:
            hist.bytes_sent.append(opt_state.step(G))
            update = None
        elif compressor is None:
            update = G.mean(0)
            hist.bytes_sent.append([dense_bytes] * workers)
        else:
            update, sent = exchange(G)
            hist.bytes_sent.append(sent)
        if velocity is not None:
            update = velocity.mul_(momentum).add_(update)
        if update is not None:
            flat.sub_((_rate(lr, t) if callable(lr) else lr) * update)
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            evaluate(t + 1)
            if progress:
                bar.set_postfix({k: f"{v[-1]:.3g}" for k, v in hist.evals.items()})
    bar.close()
    hist.wall_time = time.perf_counter() - start
    return hist
