"""The compressor contract: `Compressor`, and `Identity` (the dense baseline)."""
from __future__ import annotations

import copy
from typing import Sequence

import torch

from .. import buffers, trace
from ..checks import check_choice, check_grad, NONFINITE_POLICIES
from ..packet import Packet
from .registry import decode, decode_add, decode_mean, register_library_codec
from .wire import dense_add, dense_decode, to_bytes

#: The fused-step contract. A compressor lists in `fast_paths` the shortcuts its own methods
#: take; the callers (error feedback's ledger, the DDP hook's protocols) read that set and
#: nothing else. Each shortcut gives the bits of the generic path, and each relies on the
#: methods named here: a subclass that overrides one of them loses that shortcut (the
#: generic path runs instead) unless its own class body declares `fast_paths` again.
FAST_PATHS = {
    # decompress_mean is the codec registry's decode_mean: a sparse packet's mean touches only
    # its own entries; a mean's last quantized or sign packet is added and divided in one pass
    "codec_mean": ("decompress", "decompress_add", "decompress_mean"),
    # compress_with_feedback crosses out of the ledger exactly the values it sent (sparsifiers:
    # the kept entries are zeroed, nothing is decoded); Chain: through its first stage's
    "exact_step": ("_compress", "compress_with_feedback"),
    # compress_with_feedback(residual, grad=g) adds g into the ledger in the same pass over
    # memory that selects (Top-K) or packs (Sign), for a ledger and gradient of one dtype
    "fused_add": ("_compress", "compress_with_feedback", "select"),
    # compress_with_feedback(..., clear_grad=True) zeroes g in that step, and the mean of the
    # packets writes only the entries they list: the hook may write the mean onto those zeros
    # (decompress_mean(zeroed=True)) instead of zeroing the bucket once more
    "clears_gradient": ("_compress", "compress_with_feedback", "decompress", "decompress_add",
                        "decompress_mean"),
}


class Compressor:
    """Base class: ``compress(tensor) -> Packet``, ``decompress(packet) -> tensor``.

    Subclasses set ``codec`` and implement ``_compress(tensor)``; decoding is a
    function of the packet alone (see :func:`milktea.compressors.decode`), registered by
    the subclass's module with :func:`milktea.compressors.register_codec`. The generic
    methods below are always right; `fast_paths` (see FAST_PATHS) says which of them a
    class replaces by a faster one with the same bits. A compressor may also define
    `compress_batch(X, shape, error_feedback)` to run every simulated worker in one call
    (see milktea.batched.Custom).

    >>> from milktea import TopK, Quantize
    >>> sorted(TopK.fast_paths)
    ['clears_gradient', 'codec_mean', 'exact_step', 'fused_add']
    >>> class Rounded(Quantize):                        # changes what is sent...
    ...     def _compress(self, t):
    ...         return super()._compress(t.round())
    >>> sorted(Rounded.fast_paths)                      # ...and keeps only what does not depend on it
    ['codec_mean']
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
    #: The fused-step contract's shortcuts this class takes (FAST_PATHS); the base class's
    #: mean is the codec's own.
    fast_paths: frozenset = frozenset({"codec_mean"})
    #: Whether a packet can carry a NaN or an infinity as it is (dense values, 16-bit casts,
    #: a sparse packet's values). Codes that share a scale (quantizers, Sign) or a low-rank
    #: product cannot: one such entry would turn its whole chunk or matrix into NaN, so
    #: these compressors refuse nonfinite="ignore" (see `check_nonfinite_policy`).
    carries_nonfinite = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "fast_paths" in cls.__dict__:        # declared by this class: trusted, names checked
            cls.fast_paths = frozenset(cls.fast_paths)
            unknown = cls.fast_paths - set(FAST_PATHS)
            if unknown:
                raise TypeError(f"{cls.__name__}.fast_paths names {sorted(unknown)}; the fast paths are "
                                f"{sorted(FAST_PATHS)}")
            return
        mine = set(cls.__dict__)               # inherited: keep those whose methods it did not replace
        cls.fast_paths = frozenset(p for p in cls.fast_paths if not mine & set(FAST_PATHS[p]))

    def __init__(self, nonfinite: str = "raise"):
        self.nonfinite = check_nonfinite_policy(type(self), nonfinite)

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    def compress(self, tensor: torch.Tensor) -> Packet:
        tensor = check_grad(tensor, "gradient", self.nonfinite)
        with torch.no_grad():
            return self._compress(tensor.detach())

    def _compress(self, tensor: torch.Tensor) -> Packet:  # pragma: no cover - abstract
        raise NotImplementedError

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

    def decompress_mean(self, packets: Sequence[Packet], out: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
        """out = the mean of the decoded packets, in place: packet 0 decoded into out, the
        others added in order, divided by their count (what an all-gather delivers).
        zeroed: the caller vouches that `out` holds zeros (it cleared it, see
        compress_with_feedback's clear_grad): sparse packets then skip zeroing it again.

        >>> from milktea import TopK
        >>> c = TopK(k=1)
        >>> c.decompress_mean([c.compress(torch.tensor([0., 4, 1])), c.compress(torch.tensor([2., 0, 0]))],
        ...                   out=torch.empty(3))
        tensor([1., 2., 0.])
        """
        if not packets:
            raise ValueError("decompress_mean needs at least one packet")
        if "codec_mean" in self.fast_paths:
            return decode_mean(packets, out, zeroed)      # the codecs' own: O(k) for sparse packets
        self.decompress(packets[0], out=out)
        for p in packets[1:]:
            self.decompress_add(p, out)
        return out.div_(len(packets))

    def compress_with_feedback(self, residual: torch.Tensor, dtype: torch.dtype | None = None,
                               grad: torch.Tensor | None = None, clear_grad: bool = False) -> Packet:
        """Compress `residual` and subtract what was sent from it, in place.

        This is error feedback's step: afterwards ``residual`` holds exactly what the
        packet did not carry. `dtype` (default: the residual's) is the dtype put on the
        wire, so that a float32 ledger can send a bfloat16 gradient's packet. `residual`
        is trusted (a ledger, already checked): no input checks run on it.

        grad: this step's gradient, added to the ledger first (see `add_to_ledger`); a
        compressor may fuse that add with its own pass over memory (Top-K does, and then
        a NaN or infinity raises ValueError after the finite part of the sum reached the
        ledger: for callers that stop at an error, as the DDP hook does).
        clear_grad: zero `grad` once it is in the ledger (the DDP hook writes the mean into
        the gradient's buffer next; Top-K zeroes it in the same pass as the add).

        >>> from milktea import Quantize
        >>> r = torch.tensor([1.0, 0.3, -1.0])
        >>> p = Quantize(bits=2).compress_with_feedback(r)
        >>> r   # 0.3 was rounded to 0 and stays in the ledger
        tensor([0.0000, 0.3000, 0.0000])
        """
        if not isinstance(residual, torch.Tensor) or not residual.is_contiguous():
            raise ValueError("the residual must be a contiguous tensor (error feedback's ledger)")
        if trace.ENABLED:
            trace.note(step="generic step")
        if grad is not None:
            self.add_to_ledger(residual, grad)
            if clear_grad:
                grad.detach().zero_()
        x = residual if dtype in (None, residual.dtype) else residual.to(dtype)
        with torch.no_grad():
            packet = self._compress(x)
            decode_add(packet, residual, -1.0)
        return packet

    def add_to_ledger(self, residual: torch.Tensor, grad: torch.Tensor) -> None:
        """residual += grad, in place, after checking grad by this compressor's `nonfinite`
        policy ("raise": ValueError for a NaN or an infinity, the ledger left unchanged).

        >>> from milktea import TopK
        >>> r = torch.zeros(2)
        >>> TopK(k=1).add_to_ledger(r, torch.tensor([1.0, float("nan")]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: gradient has 1 non-finite value(s) (NaN/Inf), first at flat index 1; ...
        """
        g = check_grad(grad, "gradient", self.nonfinite)
        with torch.no_grad():
            residual.add_(g.detach().reshape(residual.shape).to(residual.dtype))

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
        gen = getattr(self, "_gen", None)
        if gen is not None and getattr(self, "stochastic", False):
            gen.manual_seed((self.seed * 1_000_003 + rank * 7919 + stream) % (1 << 62))

    def subtract_sent(self, residual: torch.Tensor, packet: Packet) -> None:
        """residual -= decompress(packet), in place (see :meth:`compress_with_feedback`,
        which compresses and subtracts in one call)."""
        decode_add(packet, residual, -1.0)

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


register_library_codec("dense", lambda p, out=None: dense_decode(p, out, p.dtype),
                       add=lambda p, out, alpha: dense_add(p, out, alpha, p.dtype))
