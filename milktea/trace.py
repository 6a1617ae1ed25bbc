"""MILKTEA_DEBUG=1: one line per bucket on stderr saying which path each tensor took.

The hook's fast paths are invisible from outside: whether Top-K added the gradient in its
selection's own pass (and zeroed it there), whether the compiled loops or torch ran, which
index encoding a packet chose, how many bytes it took. With MILKTEA_DEBUG=1 in the
environment, every bucket a protocol sends prints what happened, for example::

    milktea: rank 0 step 1 allgather 1 tensor, 53.3 kB: fc.weight 1048576 topk-1% fused add
    and clear, numba, index delta8, 53.3 kB; mean onto the zeroed gradient

Off (the default), every call here returns at once.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager

from .index import ENCODINGS
from .kernels import would_use_numba

ENABLED = os.environ.get("MILKTEA_DEBUG", "").strip() not in ("", "0")
_here = threading.local()


def note(**facts) -> None:
    """Record facts about the tensor being traced (does nothing when tracing is off)."""
    if ENABLED:
        current = getattr(_here, "item", None)
        if current is not None:
            current.update(facts)


@contextmanager
def bucket(protocol: str, step: int, rank: int, out=None):
    """Collect the tensors of one bucket (see `item`), then print one line for it."""
    if not ENABLED:
        yield
        return
    _here.items, _here.after = [], []
    yield
    items, after = _here.items, _here.after
    _here.items = _here.after = None
    total = sum(i.get("nbytes", 0) for i in items)
    parts = [_describe(i) for i in items]
    line = (f"milktea: rank {rank} step {step} {protocol} {len(items)} tensor{'s' * (len(items) != 1)}, "
            f"{_size(total)}: " + "; ".join(parts + after))
    print(line, file=out or sys.stderr, flush=True)


def begin(name: str, tensor, compressor) -> None:
    """Start tracing one tensor of the current bucket (call under `if trace.ENABLED`):
    `note` then adds what its compressor does, `end` its packet."""
    if getattr(_here, "items", None) is None:
        return
    _here.item = {"name": name, "numel": tensor.numel(), "compressor": getattr(compressor, "name", "dense"),
                  "kernels": "numba" if would_use_numba(tensor.numel(), tensor.device) else "torch"}


def end(packet=None, nbytes: int | None = None) -> None:
    """Finish the tensor `begin` started: its packet (codec, index encoding, bytes), or its
    byte count where no packet was made."""
    current = getattr(_here, "item", None)
    if current is None:
        return
    current.update(packet_facts(packet) if packet is not None else {"nbytes": nbytes or 0})
    _here.items.append(current)
    _here.item = None


def then(text: str) -> None:
    """Say what the bucket did after its tensors were sent (e.g. how the mean was written)."""
    if ENABLED and getattr(_here, "after", None) is not None and text not in _here.after:
        _here.after.append(text)


def packet_facts(packet) -> dict:
    """What a packet says about its own path: its codec, its index encoding, its bytes."""
    facts = {"codec": packet.codec, "nbytes": packet.nbytes}
    if packet.codec == "topk" and len(packet.params) == 2 and packet.params[1] < len(ENCODINGS):
        facts["index"] = ENCODINGS[packet.params[1]]
    elif packet.codec == "chain" and len(packet.params) == 3 and packet.params[2] < len(ENCODINGS):
        facts["index"] = ENCODINGS[packet.params[2]]   # a Top-K first stage: (its id, k, encoding)
    return facts


def _describe(i: dict) -> str:
    words = [i["name"], str(i["numel"]), i.get("compressor", i.get("codec", "?"))]
    words += [w for w in (i.get("step"), i.get("kernels")) if w]
    if "index" in i:
        words.append(f"index {i['index']}")
    if "nbytes" in i:
        words.append(_size(i["nbytes"]))
    return " ".join(words[:3]) + (" " + ", ".join(words[3:]) if words[3:] else "")


def _size(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 1000 else f"{nbytes / 1e3:.1f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:.2f} MB"
