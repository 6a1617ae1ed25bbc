"""The weekly report: each worker's pseudo-gradient through its own compressor copy and
ledger, and head office's token-weighted mean of what arrives.

A worker's pseudo-gradient for a fragment is  delta = theta_global - theta_local  (what
the H inner steps moved, with the sign of a gradient: the outer optimizer subtracts it).
It is compressed by the library's compressors, so its bytes are the packet's real
`nbytes` (len of the encoded bytes); with a biased compressor the part not sent waits in
the worker's ledger for the next exchange (chapter 04's old ledger, now on the weekly trend).

    >>> import torch
    >>> from milktea import TopK
    >>> ex = Reports(TopK(k=1), feedback=True, workers=[0, 1], fragments=1)
    >>> sent = [ex.send(w, 0, d) for w, d in enumerate(torch.tensor([[3., 1.], [1., -1.]]))]
    >>> [n for _, n in sent]                              # bytes of each worker's packet
    [18, 18]
    >>> weighted_mean([ex.decode(p) for p, _ in sent], [1, 1])
    tensor([2., 0.])
    >>> ex.ledger(0, 0)                                   # what worker 0 still owes
    tensor([0., 1.])
"""
from __future__ import annotations

import contextlib
import copy

import torch

from ..feedback import ErrorFeedback, MomentumCorrected
from ..packet import Packet


def weighted_mean(tensors, tokens) -> torch.Tensor:
    """Sum_w tokens_w x_w / sum_w tokens_w, added in worker order; with equal tokens it is
    (x_0 + x_1 + ...) / count, the plain mean."""
    if not tensors or len(tensors) != len(tokens):
        raise ValueError(f"need one token count per tensor (and at least one), got {len(tensors)} and {len(tokens)}")
    if any(t <= 0 for t in tokens):
        raise ValueError(f"token counts must be > 0, got {list(tokens)}")
    if len(set(tokens)) == 1:
        total = tensors[0].clone()
        for x in tensors[1:]:
            total += x
        return total.div_(len(tensors))
    total = tensors[0] * tokens[0]
    for x, t in zip(tensors[1:], tokens[1:]):
        total.add_(x, alpha=t)
    return total.div_(sum(tokens))


@contextlib.contextmanager
def torch_kernels():
    """Run the codecs on their torch kernels (the compiled ones give the same bits, as the
    library tests). A report is encoded once per H steps, and numba's thread pool, once
    started, keeps the cores busy between its kernels: measured on this course's 2-core
    machine, every later inner step of the tiny GPT took 10 to 30 times its CPU time."""
    from .. import kernels
    before, kernels.USE_NUMBA = kernels.USE_NUMBA, False
    try:
        yield
    finally:
        kernels.USE_NUMBA = before


class Reports:
    """One sender per (worker, fragment): a fork of `compressor` (its own random stream),
    inside an ErrorFeedback ledger when `feedback` (with `momentum`: DGC's momentum
    correction, the velocity in the ledger, masked where sparse packets sent entries);
    compressor None sends fp32."""

    def __init__(self, compressor, feedback: bool, workers, fragments: int, momentum: float = 0.0):
        self.compressor, self.feedback = compressor, bool(feedback and compressor is not None)
        self.senders = {}
        if compressor is not None:
            masking = callable(getattr(compressor, "sparse_parts_of", None))
            for w in workers:
                for p in range(fragments):
                    own = compressor.fork(w, p)
                    if self.feedback and momentum:
                        self.senders[w, p] = MomentumCorrected(own, momentum, masking=masking)
                    else:
                        self.senders[w, p] = ErrorFeedback(own) if self.feedback else own

    def send(self, worker: int, fragment: int, delta: torch.Tensor) -> tuple[Packet | torch.Tensor, int]:
        """(what goes on the wire, its bytes): a Packet, or the fp32 tensor itself when dense."""
        if self.compressor is None:
            return delta.clone(), delta.numel() * delta.element_size()
        with torch_kernels():
            packet = self.senders[worker, fragment].compress(delta)
        return packet, packet.nbytes

    def decode(self, sent) -> torch.Tensor:
        if isinstance(sent, torch.Tensor):
            return sent
        with torch_kernels():
            return self.compressor.decompress(sent)

    def ledger(self, worker: int, fragment: int) -> torch.Tensor | None:
        s = self.senders.get((worker, fragment))
        return s.residual if isinstance(s, ErrorFeedback) else None

    def reset_ledger(self, worker: int) -> None:
        """A worker that reopens starts from a peer's books: its old ledgers are dropped."""
        for (w, _), s in self.senders.items():
            if w == worker and isinstance(s, ErrorFeedback):
                s.reset()

    def snapshot(self, worker: int, fragment: int) -> dict | None:
        """One sender's ledger and compressor state, to `restore` if what it sends is never
        delivered (a fault-tolerant exchange that does not commit)."""
        s = self.senders.get((worker, fragment))
        return None if s is None else clone_state(_sender_state(s))

    def restore(self, worker: int, fragment: int, state: dict | None) -> None:
        if state is not None:
            _load_sender(self.senders[worker, fragment], state)

    # --- state: ledgers and the compressors' own counters and random streams ---------------
    def state_dict(self) -> dict:
        return {f"{w}/{p}": _sender_state(s) for (w, p), s in self.senders.items()}

    def load_state_dict(self, state: dict) -> None:
        if set(state) != {f"{w}/{p}" for w, p in self.senders}:
            raise ValueError(f"the saved ledgers are for senders {sorted(state)}, this run has "
                             f"{sorted(f'{w}/{p}' for w, p in self.senders)}")
        for (w, p), s in self.senders.items():
            _load_sender(s, state[f"{w}/{p}"])


def _compressor_state(c) -> dict:
    out = {}
    for name in ("first", "second"):          # Chain's two stages
        if hasattr(c, name):
            out[name] = _compressor_state(getattr(c, name))
    gen = getattr(c, "_gen", None)
    if isinstance(gen, torch.Generator):
        out["gen"] = gen.get_state()
    for name in ("step", "seed"):
        v = getattr(c, name, None)
        if isinstance(v, int) and not isinstance(v, bool):
            out[name] = v
    return out


def _load_compressor(c, state: dict) -> None:
    for name in ("first", "second"):
        if name in state:
            _load_compressor(getattr(c, name), state[name])
    if "gen" in state:
        c._gen.set_state(state["gen"])
    for name in ("step", "seed"):
        if name in state:
            setattr(c, name, state[name])


def _sender_state(s) -> dict:
    if isinstance(s, ErrorFeedback):
        r, v = s.residual, getattr(s, "velocity", None)
        state = {"residual": None if r is None else r.clone(), "steps": s.steps,
                 "compressor": _compressor_state(s.compressor)}
        if isinstance(s, MomentumCorrected):
            state["velocity"] = None if v is None else v.clone()
        return state
    return {"compressor": _compressor_state(s)}


def _load_sender(s, state: dict) -> None:
    if isinstance(s, ErrorFeedback):
        s.ledger.load_state_dict(state["residual"])
        s.steps = int(state["steps"])
        if isinstance(s, MomentumCorrected):
            v = state.get("velocity")
            s.momentum_state.tensor = None if v is None else v.clone()
        _load_compressor(s.compressor, state["compressor"])
    else:
        _load_compressor(s, state["compressor"])


def clone_state(x):
    """A deep copy of a state (tensors cloned), so a saved state never aliases a live run."""
    return copy.deepcopy(x)
