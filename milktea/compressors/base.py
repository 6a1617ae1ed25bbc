"""The compressor contract: `Compressor`, and `Identity` (the dense baseline).

One interface over rows: ``encode(rows) -> (packets, sent)`` makes one packet per row of
a [W, *shape] tensor (the simulator's W workers, or the DDP hook's one gradient), and the
codec's ``decode_mean(packets, out)`` writes their mean. Error feedback is
`milktea.ledger.Ledger.step`, which hands `encode` its ledger's rows and crosses out of
them what each packet carried (`sent`). How fast a codec encodes (a fused pass, every row
at once) is how it writes `encode`; the base class's, a packet per row from `_compress`,
is always right.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch

from .. import buffers, trace
from ..checks import check_choice, check_grad, NONFINITE_POLICIES
from .packet import Packet
from .registry import decode, decode_add, decode_mean, library_codec
from .wire import dense_add, dense_decode, to_bytes


class Compressor:
    """Base class: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``; over rows,
    ``encode(rows) -> (packets, sent)`` and ``decode_mean(packets, out)``.

    Subclasses set ``codec`` and implement ``_compress(tensor)`` (one row), or `encode`
    itself (every row at once, or fused with error feedback's add); decoding is a
    function of the packet alone (see :func:`milktea.compressors.decode`), registered by
    the subclass's module (:func:`milktea.compressors.register_codec`).

    >>> from milktea import Quantize
    >>> packets, sent = Quantize(bits=8).encode(torch.tensor([[1.0, -2.0], [0.5, 0.25]]))
    >>> [p.shape for p in packets], sent
    ([(2,), (2,)], [None, None])
    """
    codec = "dense"
    protocol = "allgather"   # how packets cross the wire: see milktea.distributed.protocols
    #: True for compressors that drop information systematically (Top-K, Sign, PowerSGD,
    #: round-to-nearest quantizers): they need error feedback to converge, and a scheme
    #: registered without saying otherwise (milktea.distributed.schemes.register) gets it.
    biased = False
    #: Magnitude from which the wire format cannot carry a value (65520 for Cast(fp16),
    #: which rounds it to inf); error feedback refuses a gradient that would push its
    #: ledger there before adding it, so a refused gradient leaves the ledger unchanged.
    overflow_at = float("inf")
    #: Whether a packet can carry a NaN or an infinity as it is (dense values, 16-bit casts,
    #: a sparse packet's values). Codes that share a scale (quantizers, Sign) or a low-rank
    #: product cannot: one such entry would turn its whole chunk or matrix into NaN, so
    #: these compressors refuse nonfinite="ignore" (see `check_nonfinite_policy`).
    carries_nonfinite = False

    def __init__(self, nonfinite: str = "raise"):
        self.nonfinite = check_nonfinite_policy(type(self), nonfinite)

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    def compress(self, tensor: torch.Tensor) -> Packet:
        tensor = check_grad(tensor, "gradient", self.nonfinite)
        with torch.no_grad():
            return self.encode(tensor.detach().unsqueeze(0))[0][0]

    def _compress(self, tensor: torch.Tensor) -> Packet:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, rows: torch.Tensor, *, add: torch.Tensor | None = None, clear_add: bool = False,
               into: torch.Tensor | None = None) -> tuple[list[Packet], list]:
        """One packet per row of `rows` ([W, *shape]; row w is worker w, see `row`), and
        what each packet carried: sent[w] is (flat positions, values) when packet w carries
        exactly those values there and nothing else (values None: rows[w]'s own values,
        sent as they are), None when only decoding it says (`milktea.ledger.Ledger.step`
        subtracts what was sent accordingly). `rows` is trusted (checked by the caller).

        add: like `rows`, added into it first (rows += add, in place, checked by this
        compressor's `nonfinite` policy): error feedback's update of its ledger, which a
        codec may fuse with its own first pass over the rows (Top-K, Sign; a NaN then
        raises after the finite part of the sum is in). clear_add: zero `add` once it is
        in (the DDP hook writes the mean into it next).
        into: a 1-D uint8 tensor a codec may write row 0's largest part into, from its
        start, instead of a new tensor (the DDP hook lends its send buffer); else unused.
        """
        coders = self.rows(rows.shape[0])
        if add is not None:
            self._add(rows, add, clear_add)
        return [c._compress(x) for c, x in zip(coders, rows)], [None] * rows.shape[0]

    def _add(self, rows: torch.Tensor, add: torch.Tensor, clear: bool) -> None:
        """rows += add after checking add by this compressor's `nonfinite` policy ("raise":
        ValueError for a NaN or an infinity, the rows left unchanged); zero add if `clear`."""
        if trace.ENABLED:
            trace.note(step="add, then encode")
        g = check_grad(add, "gradient", self.nonfinite)
        rows.add_(g.detach().reshape(rows.shape).to(rows.dtype))
        if clear:
            add.detach().zero_()

    def rows(self, count: int) -> list["Compressor"]:
        """The compressors of `encode`'s rows 0 to count - 1: this one for row 0; for row w,
        what `fork(rank + w, stream)` of this one gives (its own random stream), made when
        the rows first number more than w (before any of them is encoded) and kept. The
        simulator's one call for W workers thus rounds as W workers' own forks do."""
        twins = self.__dict__.pop("_rows", [])          # not copied into the forks made here
        try:
            rank, stream = self.__dict__.get("_at", (0, 0))
            twins += [self.fork(rank + w, stream) for w in range(len(twins) + 1, count)]
        finally:
            self._rows = twins
        return [self, *twins[:count - 1]]

    def row(self, w: int) -> "Compressor":
        """Row w's compressor (see `rows`)."""
        return self if w == 0 else self.rows(w + 1)[w]

    def decompress(self, packet: Packet, out: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(packet, Packet):
            raise TypeError(f"decompress needs a Packet, got {type(packet).__name__}")
        return decode(packet, out=out)

    def decompress_add(self, packet: Packet, out: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
        """out += alpha * decompress(packet), in place, without a full-size temporary where
        the codec allows (sparse: index_add_; quantized and sign into float32 with alpha +-1:
        one compiled pass that decodes and adds; otherwise piece by piece).

        >>> from milktea import TopK
        >>> acc = torch.ones(3)
        >>> TopK(k=1).decompress_add(TopK(k=1).compress(torch.tensor([0.5, 0, -4])), acc, alpha=0.5)
        tensor([ 1.,  1., -1.])
        """
        if not isinstance(packet, Packet):
            raise TypeError(f"decompress_add needs a Packet, got {type(packet).__name__}")
        return decode_add(packet, out, alpha)

    def decode_mean(self, packets: Sequence[Packet], out: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
        """out = the mean of the decoded packets, in place: packet 0 decoded into out, the
        others added in order, divided by their count (what an all-gather delivers; the
        codecs' own: a sparse packet touches only its entries). zeroed: the caller vouches
        that `out` holds zeros (error feedback cleared it, see `encode`'s clear_add).

        >>> from milktea import TopK
        >>> c = TopK(k=1)
        >>> c.decode_mean([c.compress(torch.tensor([0., 4, 1])), c.compress(torch.tensor([2., 0, 0]))],
        ...               out=torch.empty(3))
        tensor([1., 2., 0.])
        """
        return decode_mean(packets, out, zeroed)

    def aggregate(self, packets: Sequence[Packet]) -> torch.Tensor:
        """Sum of the decompressed packets: what a collective delivers to each worker."""
        check_same_kind(packets)
        total = self.decompress(packets[0]).clone()
        for p in packets[1:]:
            total += self.decompress(p)
        return total

    def state_dict(self) -> dict:
        """What a resumed run needs to send the packets the uninterrupted run would have
        sent: here the random generator's state, for compressors that draw (stochastic
        rounding, Top-K's sampled threshold); subclasses add their own counters.

        >>> from milktea import QSGD
        >>> a = QSGD(levels=4)
        >>> _ = a.compress(torch.randn(100))
        >>> b = QSGD(levels=4)
        >>> b.load_state_dict(a.state_dict())
        >>> x = torch.randn(100)
        >>> a.compress(x).to_bytes() == b.compress(x).to_bytes()
        True
        """
        gen = getattr(self, "_gen", None)
        return {"generator": gen.get_state()} if isinstance(gen, torch.Generator) else {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned (ValueError if it is not this kind's state)."""
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict needs the dict state_dict() returned, got {type(state).__name__}")
        gen = getattr(self, "_gen", None)
        saved = state.get("generator")
        if (saved is None) != (not isinstance(gen, torch.Generator)):
            raise ValueError(f"this state {'has no' if saved is None else 'has a'} random generator; "
                             f"{self!r} {'draws' if saved is None else 'does not draw'} random numbers: "
                             f"load the state of the same compressor")
        if saved is not None:
            if not isinstance(saved, torch.Tensor) or saved.dtype != torch.uint8:
                raise TypeError("the saved generator state must be a uint8 tensor (Generator.get_state())")
            try:
                gen.set_state(saved)
            except RuntimeError as err:
                raise ValueError(f"the saved generator state does not fit a CPU generator: {err}") from None

    def fork(self, rank: int = 0, stream: int = 0) -> "Compressor":
        """A copy for one worker's tensor stream: no state is shared with the original.

        Stochastic compressors get a random stream of their own per (rank, stream), so
        that workers' rounding errors average out instead of adding up. Compressors whose
        workers must agree (RandomK's positions, PowerSGD's start) keep their seed.
        """
        twin = copy.deepcopy(self)
        twin._reseed(rank, stream)
        return twin

    def _reseed(self, rank: int, stream: int) -> None:
        self._at = (rank, stream)
        self.__dict__.pop("_rows", None)      # the rows' twins follow the new place
        gen = getattr(self, "_gen", None)
        if gen is not None and getattr(self, "stochastic", False):
            gen.manual_seed((self.seed * 1_000_003 + rank * 7919 + stream) % (1 << 62))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_args().items())
        return f"{type(self).__name__}({args})"

    def _repr_args(self) -> dict:
        return {}


def check_nonfinite_policy(cls, nonfinite: str) -> str:
    """`nonfinite` checked for a compressor class: "ignore" only where its packets can carry
    a NaN or an infinity as they are (`carries_nonfinite`), so that under every policy a
    finite entry decodes finite.

    >>> from milktea import Quantize
    >>> Quantize(bits=8, nonfinite="ignore")      # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Quantize cannot pass NaN or infinity through: ...
    """
    check_choice(nonfinite, NONFINITE_POLICIES, "nonfinite")
    if nonfinite == "ignore" and not cls.carries_nonfinite:
        raise ValueError(f"{cls.__name__} cannot pass NaN or infinity through: its entries share a scale "
                         f"(or a low-rank product), so one of them would make its neighbours NaN; use "
                         f"nonfinite='raise' (refuse such a gradient) or 'zero' (send them as 0)")
    return nonfinite


def check_same_kind(packets: Sequence[Packet]) -> None:
    """ValueError unless `packets` is a non-empty list of Packets of one shape and one dtype
    (what a sum or a mean of them needs)."""
    if len(packets) == 0:
        raise ValueError("aggregate needs at least one packet")
    for p in packets:
        if not isinstance(p, Packet):
            raise TypeError(f"aggregate needs Packets, got {type(p).__name__}")
        if p.shape != packets[0].shape or p.dtype != packets[0].dtype:
            raise ValueError(f"packets disagree: shape {p.shape} and dtype {p.dtype} vs shape "
                             f"{packets[0].shape} and dtype {packets[0].dtype}; aggregate the packets "
                             f"of one tensor, compressed from the same dtype")


class Identity(Compressor):
    """No compression: the raw tensor bytes (the dense baseline).

    >>> Identity().compress(torch.ones(10)).ratio < 1.0   # a small header costs a few bytes
    True
    """
    codec = "dense"
    protocol = "allreduce"
    carries_nonfinite = True

    @property
    def name(self) -> str:
        return "dense"

    def _compress(self, t):
        return Packet("dense", tuple(t.shape), t.dtype, (), (to_bytes(buffers.empty(t.shape, t.dtype, t.device).copy_(t)),))


def _dense_cost(compressor, shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()


DENSE = library_codec(Identity, 0, 1.0, lambda p, out=None: dense_decode(p, out, p.dtype),
                      add=lambda p, out, alpha: dense_add(p, out, alpha, p.dtype), cost=_dense_cost,
                      schemes={"dense": ("dense all-reduce", lambda ratio, rank: None, False)})
