"""What every protocol shares: the registry of protocol names, and the `Protocol` class.

A compressor names its protocol in one class attribute (`protocol = "allgather"`);
`protocol_of` reads it, `get` turns the name into the class, and a new protocol is one
subclass of `Protocol` plus `register(name, cls)`.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from milktea.distributed.checkpoint import coder_state, load_coder_state
from milktea.ledger import Ledger


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
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; registered: {sorted(PROTOCOLS)} "
                         "(add one with milktea.distributed.protocols.register)")
    return PROTOCOLS[name]


def stream_of(name: str) -> int:
    """A stable stream number for a parameter name: its compressor's random stream on a rank."""
    return zlib.crc32(name.encode())


def collective_for(compressor) -> str:
    """The cost model's name (`milktea.cost.comm_time`) for the collective that moves a
    compressor's packets, from the protocol it declares: "allreduce" when the workers'
    packets can be summed on the wire (no compressor, fp16/bf16 casts, PowerSGD's
    factors), "allgather" otherwise (sparse and quantized packets differ from worker to
    worker), "compressed_allreduce" for `use_compressed_allreduce`.

    >>> from milktea import Cast, TopK
    >>> collective_for(None), collective_for(Cast()), collective_for(TopK(0.01))
    ('allreduce', 'allreduce', 'allgather')
    """
    return get(protocol_of(compressor)).collective


@dataclass
class Item:
    """One parameter's gradient inside a bucket: `tensor` is a view of DDP's buffer (shaped
    like the parameter); `used`: this rank computed a gradient for it since the last sync."""
    name: str
    tensor: torch.Tensor
    used: bool = True


def log(comm, step: int, **amounts) -> None:
    """Add amounts (bytes, seconds) to this step's statistics, where the hook keeps them."""
    if comm.log is not None:
        comm.log.add(step, **amounts)


class Protocol:
    """One way across the wire, for one rank of one hooked model.

    coders[name]: this rank's copy of the compressor for parameter `name` (`fork`ed, so
    stochastic rounding has its own stream per rank and parameter); ledgers[name]: its
    error-feedback `Ledger` (float32 for half-precision gradients, as the simulator's).
    Both are keyed by name, so any bucketing finds them.
    """
    collective = "allgather"   # the cost model's name for the collective that moves the packets
    summed = False             # True: the workers' contributions are summed before decoding

    def __init__(self, compressor, error_feedback: bool = False, rank: int = 0, world: int = 1):
        self.compressor, self.error_feedback = compressor, bool(error_feedback)
        self.rank, self.world = rank, world
        self.coders: dict[str, object] = {}
        self.ledgers: dict[str, Ledger] = {}

    def accepts(self, shape: tuple) -> bool:
        """Whether a parameter of this shape is worth compressing (else it is sent dense)."""
        return True

    def coder(self, name: str):
        c = self.coders.get(name)
        if c is None:
            c = self.coders[name] = self.compressor.fork(self.rank, stream_of(name))
        return c

    def ledger(self, name: str) -> Ledger:
        """Parameter `name`'s ledger. The hook stops at its first error, so a gradient's
        NaN may be found in the compressor's own pass (check_first=False)."""
        led = self.ledgers.get(name)
        if led is None:
            led = self.ledgers[name] = Ledger(check_first=False)
        return led

    def run(self, comm, items: list[Item], step: int) -> None:  # pragma: no cover - abstract
        """Replace every item's tensor by the average over the ranks of what they sent."""
        raise NotImplementedError

    def probe(self, tensors: list[torch.Tensor], link) -> tuple[float, float]:  # pragma: no cover
        """(codec seconds, communication seconds on `link`) for these gradients, on a copy."""
        raise NotImplementedError

    def probe_agreed(self, comm, tensors: list[torch.Tensor], link, step: int) -> tuple[float, float]:
        """`probe`'s figures, the faster of two tries (a cold cache does not decide), and the
        slowest rank's of them on every rank (one tiny all-reduce): what the `auto` policy
        compares with a dense all-reduce, the same on every rank."""
        import torch.distributed as dist
        codec_s, comm_s = min(self.probe(tensors, link) for _ in range(2)) if tensors else (0.0, 0.0)
        agreed = torch.tensor([codec_s, comm_s], dtype=torch.float64, device=tensors[0].device if tensors else None)
        comm.all_reduce(agreed, step, op=dist.ReduceOp.MAX)
        return tuple(agreed.tolist())

    # -- saving: everything keyed by parameter name ---------------------------------------
    def state_dict(self) -> dict:
        return {"coders": {name: coder_state(c) for name, c in self.coders.items()},
                "residuals": {n: led.state_dict() for n, led in self.ledgers.items()}}

    def load_state_dict(self, state: dict, device=None) -> None:
        self.coders.clear()
        for name, saved in state["coders"].items():
            load_coder_state(self.coder(name), saved)
        self.ledgers.clear()
        for n, r in state["residuals"].items():
            self.ledger(n).load_state_dict(r, device)
