"""How a compressor's packets cross the wire: one strategy class per `protocol` name.

Every compressor says how it travels in one class attribute, and everything that moves or
prices packets (the DDP hook, `cost.collective_for`, the simulator, the auto policy) reads
that one declaration through `protocol_of` and `get`:

    >>> from milktea import TopK, PowerSGD
    >>> protocol_of(TopK(0.01)), protocol_of(PowerSGD(2)), protocol_of(None)
    ('allgather', 'lowrank', 'allreduce')
    >>> get("allgather").collective
    'allgather'

- "allreduce" (dense, Identity, Cast): the decoded values sum on the wire: one all-reduce.
- "allgather" (sparsifiers, quantizers, Sign, Chain): every rank's packet differs, so the
  packets are gathered as bytes and each rank decodes and sums all of them.
- "lowrank" (PowerSGD): P = M Q all-reduced, orthonormalised, Q = M^T P all-reduced.

Inside the hook one protocol object per hooked model owns, per parameter name, this
rank's copy of the compressor (its own random stream) and its error-feedback ledger. It
is handed a bucket's compressed parameters as `Item`s (views into DDP's bucket) and
overwrites them with the average. A new protocol is one subclass + `register(name, cls)`.
"""
from __future__ import annotations

import copy
import time
import zlib
from dataclasses import dataclass

import torch

from milktea import cost
from milktea.packet import Packet


# --- the registry ---------------------------------------------------------------------------
PROTOCOLS: dict[str, type] = {}


def register(name: str, cls: type) -> type:
    """Make `cls` (a Protocol subclass) the strategy of compressors declaring `protocol = name`."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a protocol name is a non-empty str, got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise TypeError(f"register needs a Protocol subclass, got {cls!r}")
    PROTOCOLS[name] = cls
    return cls


def protocol_of(compressor) -> str:
    """The protocol a compressor declares ("allreduce" for None: plain averaging)."""
    if compressor is None:
        return "allreduce"
    inner = getattr(compressor, "compressor", compressor)      # unwrap an ErrorFeedback ledger
    name = getattr(inner, "protocol", None)
    if name is None:
        raise TypeError(f"{type(inner).__name__} declares no `protocol` class attribute "
                        f"(one of {sorted(PROTOCOLS)})")
    return name


def get(name: str) -> type:
    """The Protocol class registered under `name`."""
    if name not in PROTOCOLS:    # the library's own protocols register when their module loads
        from milktea.distributed import compressed_allreduce  # noqa: F401
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; registered: {sorted(PROTOCOLS)} "
                         "(add one with milktea.distributed.protocols.register)")
    return PROTOCOLS[name]


def stream_of(name: str) -> int:
    """A stable stream number for a parameter name: its compressor's random stream on a rank."""
    return zlib.crc32(name.encode())


@dataclass
class Item:
    """One parameter's gradient inside a bucket: `tensor` is a view of DDP's buffer (shaped
    like the parameter); `used`: this rank computed a gradient for it since the last sync."""
    name: str
    tensor: torch.Tensor
    used: bool = True


def _log(comm, step: int, **amounts) -> None:
    if comm.log is not None:
        comm.log.add(step, **amounts)


def _generators(obj, path="") -> dict:
    """Every torch.Generator a compressor holds (Chain: its stages' too), by attribute path."""
    out = {}
    for k, v in vars(obj).items():
        if isinstance(v, torch.Generator):
            out[path + k] = v
        elif hasattr(v, "compress") and hasattr(v, "__dict__"):
            out.update(_generators(v, f"{path}{k}."))
    return out


def coder_state(c) -> dict:
    """One compressor copy's state for a checkpoint: its own `state_dict` (if it has one)
    and the state of every random generator it holds, so a restored copy rounds exactly
    as the saved one would have."""
    return {"state": c.state_dict() if hasattr(c, "state_dict") else None,
            "generators": {k: g.get_state() for k, g in _generators(c).items()}}


def load_coder_state(c, saved: dict) -> None:
    """Restore what `coder_state` returned into the copy `c`."""
    if saved["state"] is not None:
        c.load_state_dict(saved["state"])
    gens = _generators(c)
    for k, g in saved["generators"].items():
        if k not in gens:
            raise ValueError(f"saved state has a random generator at {k!r}; this compressor has "
                             f"{sorted(gens) or 'none'}")
        gens[k].set_state(g)


class Protocol:
    """One way across the wire, for one rank of one hooked model.

    coders[name]: this rank's copy of the compressor for parameter `name` (`fork`ed, so
    stochastic rounding has its own stream per rank and parameter); residuals[name]: its
    error-feedback ledger. Both are keyed by name, so any bucketing finds them.
    """
    collective = "allgather"   # the cost model's name for the collective that moves the packets
    summed = False             # True: the workers' contributions are summed before decoding

    def __init__(self, compressor, error_feedback: bool = False, rank: int = 0, world: int = 1):
        self.compressor, self.error_feedback = compressor, bool(error_feedback)
        self.rank, self.world = rank, world
        self.coders: dict[str, object] = {}
        self.residuals: dict[str, torch.Tensor] = {}

    def accepts(self, shape: tuple) -> bool:
        """Whether a parameter of this shape is worth compressing (else it is sent dense)."""
        return True

    def coder(self, name: str):
        if name not in self.coders:
            self.coders[name] = self.compressor.fork(self.rank, stream_of(name))
        return self.coders[name]

    def ledger(self, item: Item) -> torch.Tensor:
        r = self.residuals.get(item.name)
        if r is None:
            r = self.residuals[item.name] = torch.zeros_like(item.tensor, memory_format=torch.contiguous_format)
        return r

    def run(self, comm, items: list[Item], step: int) -> None:  # pragma: no cover - abstract
        """Replace every item's tensor by the average over the ranks of what they sent."""
        raise NotImplementedError

    def probe(self, tensors: list[torch.Tensor], link) -> tuple[float, float]:  # pragma: no cover
        """(codec seconds, communication seconds on `link`) for these gradients, on a copy."""
        raise NotImplementedError

    # -- saving: everything keyed by parameter name ---------------------------------------
    def state_dict(self) -> dict:
        return {"coders": {name: coder_state(c) for name, c in self.coders.items()},
                "residuals": {n: r.clone() for n, r in self.residuals.items()}}

    def load_state_dict(self, state: dict, device=None) -> None:
        self.coders.clear()
        for name, saved in state["coders"].items():
            load_coder_state(self.coder(name), saved)
        self.residuals = {n: r.clone().to(device) if device is not None else r.clone()
                          for n, r in state["residuals"].items()}



def _clears_in_pass(c) -> bool:
    """Whether the hook may let `c` zero the gradient in its ledger pass and then write the
    mean of sparse packets onto those zeros (saving a pass over the bucket): Top-K's,
    Random-K's and Chain's own methods, which take the keywords (a subclass's overrides
    may not)."""
    from milktea.compressors.base import Compressor
    from milktea.compressors.chain import Chain
    from milktea.compressors.sparse import Sparsifier
    t = type(c)
    def own_step(k):
        return k.compress_with_feedback is Sparsifier.compress_with_feedback and k._compress is Sparsifier._compress
    if isinstance(c, Chain):     # Top-K then a quantizer: its own step, through the first stage's
        own = (t.compress_with_feedback is Chain.compress_with_feedback and t._compress is Chain._compress
               and own_step(type(c.first)))
    else:
        own = isinstance(c, Sparsifier) and own_step(t)
    return (own and t.decompress_mean is Compressor.decompress_mean
            and t.decompress is Compressor.decompress and t.decompress_add is Compressor.decompress_add)


class AllGather(Protocol):
    """Packets that differ per rank (Top-K, quantizers, Sign, Chain).

    Hot path, per bucket: each item is compressed on its own (with error feedback: the
    gradient added to its ledger, which Top-K fuses with its selection's first pass over
    memory, zeroing the gradient in the same pass where the mean will land on zeros);
    the packets are laid end to end as one byte string per rank and
    all-gathered (sizes first); then each item is overwritten by the mean of the ranks'
    decoded packets (`decompress_mean`: rank 0's decoded, the others added in rank order,
    divided by N; a sparse packet's mean divides only the entries it touched). Nothing is
    re-quantized on the way, so every rank gets exactly mean_r decode(packet_r).
    """
    collective = "allgather"

    def run(self, comm, items, step):
        t0 = time.perf_counter()
        wire, cleared = [], set()
        for it in items:
            c = self.coder(it.name)
            if self.error_feedback and it.used:   # ledger += gradient, sent, crossed out
                if _clears_in_pass(c):   # the gradient zeroed as it is added: the mean lands on zeros
                    packet = c.compress_with_feedback(self.ledger(it), grad=it.tensor, clear_grad=True)
                    cleared.add(it.name)
                else:
                    packet = c.compress_with_feedback(self.ledger(it), grad=it.tensor)
            else:   # no ledger, or no gradient here: the ledger waits, a zero gradient is sent
                packet = c.compress(it.tensor)
            wire.append(packet.to_tensor())
        payload = torch.cat(wire)
        _log(comm, step, compress_s=time.perf_counter() - t0)
        _log(comm, step, payload_bytes=payload.numel())
        parts = comm.all_gather_bytes(payload, step)
        t0 = time.perf_counter()
        offsets = [0] * len(parts)
        for it in items:
            packets = []
            for r, part in enumerate(parts):
                packet = Packet.from_tensor(part[offsets[r]:])
                offsets[r] += packet.nbytes
                if packet.shape != tuple(it.tensor.shape):
                    raise ValueError(f"rank {r} sent a packet of shape {packet.shape} for {it.name}, "
                                     f"which has shape {tuple(it.tensor.shape)}")
                packets.append(packet)
            if it.name in cleared:
                self.coders[it.name].decompress_mean(packets, out=it.tensor, zeroed=True)
            else:
                self.coders[it.name].decompress_mean(packets, out=it.tensor)
        _log(comm, step, decode_s=time.perf_counter() - t0)

    def probe(self, tensors, link):
        c, N = copy.deepcopy(self.compressor), self.world
        t0 = time.perf_counter()
        packets = [c.compress(t) for t in tensors]
        t1 = time.perf_counter()
        for t, p in zip(tensors, packets):
            out = torch.empty_like(t)
            c.decompress(p, out=out)
            for _ in range(N - 1):
                c.decompress_add(p, out)
        t2 = time.perf_counter()
        nbytes = sum(p.nbytes for p in packets)
        return (t1 - t0) + (t2 - t1), cost.allgather_time(8, N, link) + cost.allgather_time(nbytes, N, link)


class AllReduce(Protocol):
    """Values that sum on the wire (Identity, Cast; and None: plain averaging).

    Hot path, per bucket: each item is divided by N (so fp16 cannot overflow in the sum),
    compressed (through its ledger with error feedback), decoded in place, and copied
    into one wire tensor of the compressor's `dtype` (fp16/bf16 for Cast: the decoded
    values are exactly representable in it); one all-reduce sums it; each item gets its
    slice back.
    """
    collective = "allreduce"

    def run(self, comm, items, step):
        t0 = time.perf_counter()
        N = self.world
        dtype = getattr(self.compressor, "dtype", None) or items[0].tensor.dtype
        low = torch.empty(sum(it.tensor.numel() for it in items), dtype=dtype, device=items[0].tensor.device)
        off = 0
        for it in items:
            x, c = it.tensor.div_(N), self.coder(it.name)
            if self.error_feedback and it.used:
                packet = c.compress_with_feedback(self.ledger(it), grad=x)
            else:
                packet = c.compress(x)
            c.decompress(packet, out=x)             # exactly what was sent
            low[off: off + x.numel()].copy_(x.view(-1))
            off += x.numel()
        _log(comm, step, compress_s=time.perf_counter() - t0)
        _log(comm, step, payload_bytes=low.numel() * low.element_size())
        comm.all_reduce(low, step)
        t0 = time.perf_counter()
        off = 0
        for it in items:
            it.tensor.view(-1).copy_(low[off: off + it.tensor.numel()])
            off += it.tensor.numel()
        _log(comm, step, decode_s=time.perf_counter() - t0)

    def probe(self, tensors, link):
        dtype = getattr(self.compressor, "dtype", None) or tensors[0].dtype
        t0 = time.perf_counter()
        nbytes = 0
        for t in tensors:
            low = t.div(self.world).to(dtype)
            low.to(t.dtype)
            nbytes += low.numel() * low.element_size()
        return time.perf_counter() - t0, cost.ring_allreduce_time(nbytes, self.world, link)


class LowRank(Protocol):
    """PowerSGD (Vogels et al. 2019): per matrix M (the parameter's gradient as rows x rest).

    Hot path, per bucket: M += ledger; P = M Q for every matrix, all P's in one all-reduce;
    orthonormalise each P, Q = M^T P, all Q's in one all-reduce, divided by N; the item
    becomes P Q^T and the ledger keeps M - P Q_own^T. The averaged Q is every rank's warm
    start for the next step, so the ranks stay in step.
    """
    collective = "allreduce"
    summed = True

    def accepts(self, shape):
        if len(shape) < 2:
            return False
        rows = shape[0]
        cols = 1
        for d in shape[1:]:
            cols *= d
        r = min(self.compressor.rank, rows, cols)
        return r * (rows + cols) < rows * cols     # the factors must be smaller than the matrix

    def run(self, comm, items, step):
        t0 = time.perf_counter()
        views = [it.tensor.view(it.tensor.shape[0], -1) for it in items]
        mats = [v.float() for v in views]           # the bucket itself when it is float32
        for it, m in zip(items, mats):
            if self.error_feedback and it.used and it.name in self.residuals:
                m.add_(self.residuals[it.name])
        ps = [self.coder(it.name).project(m) for it, m in zip(items, mats)]
        P = torch.cat([p.reshape(-1) for p in ps])
        _log(comm, step, compress_s=time.perf_counter() - t0)
        _log(comm, step, payload_bytes=P.numel() * P.element_size())
        comm.all_reduce(P, step)
        t0 = time.perf_counter()
        qs, off = [], 0
        for j, (it, m) in enumerate(zip(items, mats)):
            p = ps[j] = P[off: off + ps[j].numel()].view_as(ps[j])
            off += p.numel()
            q = self.coder(it.name).finish(m, p)
            if self.error_feedback and it.used:   # the ledger keeps what this rank's P Q^T missed
                r = self.residuals.get(it.name)
                if r is None:
                    r = self.residuals[it.name] = torch.empty_like(m)
                torch.addmm(m, p, q.t(), alpha=-1, out=r)
            qs.append(q)
        Q = torch.cat([q.reshape(-1) for q in qs])
        _log(comm, step, compress_s=time.perf_counter() - t0)
        _log(comm, step, payload_bytes=Q.numel() * Q.element_size())
        comm.all_reduce(Q, step)
        t0 = time.perf_counter()
        Q.div_(self.world)
        off = 0
        for it, v, p, q in zip(items, views, ps, qs):
            q = Q[off: off + q.numel()].view_as(q)
            off += q.numel()
            c = self.coders[it.name]
            if c.warm_start:
                c.q = q.clone()       # every rank starts the next step from the same averaged Q
            if v.dtype == torch.float32:
                torch.mm(p, q.t(), out=v)       # P Q^T straight into the bucket
            else:
                v.copy_(p @ q.t())
        _log(comm, step, decode_s=time.perf_counter() - t0)

    def probe(self, tensors, link):
        c = copy.deepcopy(self.compressor)
        t0 = time.perf_counter()
        pb = qb = 0
        for t in tensors:
            m = t.reshape(t.shape[0], -1).float()
            p = c.project(m)
            q = c.finish(m, p)
            c.expand(p, q)
            pb, qb = pb + p.numel() * 4, qb + q.numel() * 4
        N = self.world
        return time.perf_counter() - t0, cost.ring_allreduce_time(pb, N, link) + cost.ring_allreduce_time(qb, N, link)


register("allgather", AllGather)
register("allreduce", AllReduce)
register("lowrank", LowRank)
