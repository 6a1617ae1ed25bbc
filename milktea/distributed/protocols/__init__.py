"""How a compressor's packets cross the wire: one strategy class per `protocol` name.

Every compressor says how it travels in one class attribute, and everything that moves or
prices packets (the DDP hook, `collective_for`, the simulator, the auto policy) reads
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
from .base import (PROTOCOLS, Item, Protocol, collective_for, get, log, protocol_of, register,  # noqa: F401
                   stream_of)
from . import allgather, allreduce, compressed_allreduce, lowrank  # noqa: F401  (they register themselves)
from .allgather import AllGather  # noqa: F401
from .allreduce import AllReduce  # noqa: F401
from .compressed_allreduce import CompressedAllReduceProtocol  # noqa: F401
from .lowrank import LowRank  # noqa: F401
