"""Which compressors fit a sharded step, and where error feedback's ledger goes.

A reduce-scatter sends each rank its own chunk of the gradient, so a compressor must
work on any chunk alone: the library's quantizers, Top-K, Sign, QSGD, TernGrad, Cast,
Chain and any compressor of your own whose `protocol` is "allgather" (the default) or
"allreduce". PowerSGD cannot: its packets are the factors of a whole matrix, summed over
the ranks ("lowrank").

Where the ledger goes is the lesson of sharding. The error of a compressed chunk is made
by its sender, before anything is summed, so error feedback needs each rank to remember
what it did not send of every chunk it sends: (N-1)/N of a float32 gradient ("worker"),
the memory sharding saved (3x the sharded gradient at N=4). Only where the compressed hop
comes after a reduction is the ledger as small as the shard ("shard"): HSDP's replicate
hop, where each rank sends its reduced shard to its replicas.

The default (`error_feedback=None`, or "auto") follows the library's one rule,
`milktea.ledger.use_ledger`: a ledger for a compressor that drops information the same
way every time (`biased`), none for an unbiased one (its errors average out over the
ranks). Where the ledger is the shard's size (HSDP's replicate hop) the rule holds as it
is. Where it would cost (N-1)/N of the gradient ("worker"), a biased compressor gets one
only when it drops much: more than `LEDGER_ABOVE` of a Gaussian chunk's norm (Top-K,
Sign, 2-bit codes). Blockwise int8 and int4 carry every entry within half a step of its
block's scale: ZeRO++'s qgZ sends them with no ledger, and `python -m milktea.bench fsdp`
sets int8 with a worker ledger beside int8 without (loss and memory per rank):

    >>> from milktea import Quantize, TopK
    >>> ledger_for(Quantize(bits=8, chunk=256), None, hsdp=False)[0] is None
    True
    >>> ledger_for(Quantize(bits=8, chunk=256), None, hsdp=True)[0]        # on the shard: use_ledger's rule
    'shard'
    >>> ledger_for(TopK(ratio=0.01), None, hsdp=False)[0]
    'worker'
"""
from __future__ import annotations

import torch

from ..distributed.protocols import protocol_of
from ..ledger import use_ledger

#: the default keeps a worker ledger for a biased compressor whose relative error on a Gaussian chunk
#: is above this: 0.61 for Sign, 0.95 for Top-1%, 0.83 for 2-bit codes, 0.13 for int4 in
#: blocks of 256, 0.007 for int8
LEDGER_ABOVE = 0.25
CHOICES = (None, "auto", True, False, "worker", "shard")


def check_compressor(compressor, what: str, protocols=("allgather", "allreduce")):
    """`compressor` checked for `what` ("gradients", "weights"): None, or a milktea
    compressor whose packets are made chunk by chunk (its protocol one of `protocols`)."""
    if compressor is None:
        return None
    if not all(callable(getattr(compressor, m, None)) for m in ("compress", "decompress", "fork")):
        raise TypeError(f"the {what} compressor must be a milktea compressor (e.g. Quantize(bits=8, chunk=256)) "
                        f"or None, got {type(compressor).__name__}")
    name = protocol_of(compressor)
    if name not in protocols:
        raise ValueError(f"{compressor!r} cannot split per destination: its protocol {name!r} needs every rank's "
                         f"whole tensor to be combined on the way (PowerSGD's factors are summed over the ranks), "
                         f"while a sharded step sends each rank only its own chunk. Use a compressor that works on "
                         f"any chunk alone (protocol 'allgather' or 'allreduce': Quantize, TopK, Sign, QSGD, Cast, "
                         f"Chain), or compress HSDP's replicate hop with it (replicate_group=...)")
    return compressor


def relative_error(compressor, numel: int = 4096) -> float:
    """||x - decode(compress(x))|| / ||x|| on a fixed Gaussian chunk, with a copy of
    `compressor` (its own random streams are not touched).

    >>> from milktea import Sign
    >>> round(relative_error(Sign()), 2)
    0.61
    """
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    c = compressor.fork(0, 0)
    d = c.decompress(c.compress(x)).float()
    return float((x - d).norm() / x.norm())


def ledger_for(compressor, error_feedback, *, hsdp: bool) -> tuple[str | None, str]:
    """(where the ledger goes: None, "worker" or "shard"; why), for `error_feedback` one of
    None or "auto" (the default: follow the compressor, as `milktea.ledger.use_ledger`),
    True (a ledger where the compressor runs), False (none), "worker", "shard"."""
    if not (error_feedback is None or isinstance(error_feedback, bool)
            or (isinstance(error_feedback, str) and error_feedback in CHOICES)):
        raise ValueError(f"error_feedback must be None or 'auto' (follow the compressor), True, False, "
                         f"'worker' or 'shard', got {error_feedback!r}")
    where = "shard" if hsdp else "worker"
    if error_feedback is True:
        error_feedback = where
    if compressor is None:
        if error_feedback not in ("auto", None, False):
            raise ValueError(f"error_feedback={error_feedback!r} needs a compressor: nothing is dropped without one")
        return None, "as nothing is compressed"
    if error_feedback is False:
        return None, "as asked"
    if error_feedback == "shard" and not hsdp:
        raise ValueError("error_feedback='shard' needs a compressed hop after a reduction: in a reduce-scatter "
                         "every rank compresses its chunks for the others before anything is summed, so what "
                         "they drop is known only to the sender, in its full gradient. Use 'worker' (a ledger "
                         "of (N-1)/N of the gradient on every rank), or HSDP with replicate_group=..., where the "
                         "reduced shard is compressed and its ledger is the shard's size")
    if error_feedback == "worker" and hsdp:
        raise ValueError("with replicate_group the compressor runs on the reduced shard, after the reduce-scatter: "
                         "its ledger is the shard's (error_feedback='shard', True or None)")
    if error_feedback not in ("auto", None):
        return error_feedback, "as asked"
    if not use_ledger(compressor):
        return None, "as the compressor is unbiased: its errors average out over the ranks"
    if hsdp:
        return where, "as the compressor is biased, and a ledger on the reduced shard costs one gradient shard"
    err = relative_error(compressor)
    if err <= LEDGER_ABOVE:
        return None, (f"as the compressor carries the gradient nearly whole (relative error {err:.3g} <= "
                      f"{LEDGER_ABOVE}), and a worker ledger would cost (N-1)/N of the gradient")
    return where, f"as the compressor is biased and drops much (relative error {err:.3g} > {LEDGER_ABOVE})"
