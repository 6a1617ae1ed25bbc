"""MILKTEA_DEBUG=1: one line per bucket on stderr, the hops it took through the DDP hook.

The hook's path is the picture at the top of docs/architecture.md; with MILKTEA_DEBUG=1 in
the environment every bucket prints the path it really took: the protocols it went
through, and for each tensor its step (whether Top-K or Sign added the gradient in their
own pass), the kernels (the compiled loops or torch), the index encoding, the bytes; then
the collective and how the mean was written. For example::

    milktea: rank 0 step 1: hook -> communication thread -> allreduce: 2 dense tensors, 8.0 kB
    -> allgather: fc.weight 1024000 topk-1% Ledger.step, fused add and clear, numba, index delta8,
    53.3 kB -> all-gather -> decode_mean onto the zeroed gradient -> future set

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


@contextmanager
def bucket(step: int, rank: int, out=None, head: str = "hook -> communication thread"):
    """Collect the hops of one bucket (see `hop`), then print one line for it (`head`: the
    hops before the collecting thread's)."""
    if not ENABLED:
        yield
        return
    _here.hops, _here.item = [], None
    try:
        yield
    finally:
        hops, _here.hops = _here.hops, None
        line = " -> ".join([head] + [_describe_hop(h) for h in hops] + ["future set"])
        print(f"milktea: rank {rank} step {step}: {line}", file=out or sys.stderr, flush=True)


def hop(name: str) -> None:
    """Start a hop of the current bucket (a protocol, a collective, a decode)."""
    hops = getattr(_here, "hops", None)
    if ENABLED and hops is not None:
        hops.append({"name": name, "items": [], "after": []})


def note(**facts) -> None:
    """Record facts about the tensor being traced (does nothing when tracing is off)."""
    if ENABLED:
        current = getattr(_here, "item", None)
        if current is not None:
            current.update(facts)


def begin(name: str, tensor, compressor) -> None:
    """Start tracing one tensor of the current hop (call under `if trace.ENABLED`): `note`
    then adds what its compressor does, `end` its packet."""
    if getattr(_here, "hops", None) is None:
        return
    _here.item = {"name": name, "numel": tensor.numel(), "compressor": getattr(compressor, "name", "dense"),
                  "kernels": "numba" if would_use_numba(tensor.numel(), tensor.device) else "torch"}


def end(packet=None, nbytes: int | None = None) -> None:
    """Finish the tensor `begin` started: its packet (codec, index encoding, bytes), or its
    byte count where no packet was made."""
    current, hops = getattr(_here, "item", None), getattr(_here, "hops", None)
    if current is None or not hops:
        return
    current.update(packet_facts(packet) if packet is not None else {"nbytes": nbytes or 0})
    hops[-1]["items"].append(current)
    _here.item = None


def then(text: str) -> None:
    """Say what the current hop did after its tensors (e.g. how the mean was written)."""
    hops = getattr(_here, "hops", None)
    if ENABLED and hops and text not in hops[-1]["after"]:
        hops[-1]["after"].append(text)


def packet_facts(packet) -> dict:
    """What a packet says about its own path: its codec, its index encoding, its bytes."""
    facts = {"codec": packet.codec, "nbytes": packet.nbytes}
    if packet.codec == "topk" and len(packet.params) == 2 and packet.params[1] < len(ENCODINGS):
        facts["index"] = ENCODINGS[packet.params[1]]
    elif packet.codec == "chain" and len(packet.params) == 3 and packet.params[2] < len(ENCODINGS):
        facts["index"] = ENCODINGS[packet.params[2]]   # a Top-K first stage: (its id, k, encoding)
    return facts


def _describe_hop(h: dict) -> str:
    parts = [_describe(i) for i in h["items"]] + h["after"]
    if not parts:
        return h["name"]
    total = sum(i.get("nbytes", 0) for i in h["items"])
    size = f" ({_size(total)})" if len(h["items"]) > 1 else ""
    return f"{h['name']}{size}: " + "; ".join(parts)


def _describe(i: dict) -> str:
    words = [i["name"], str(i["numel"]), i.get("compressor", i.get("codec", "?"))]
    words += [w for w in (i.get("ledger"), i.get("step"), i.get("kernels")) if w]
    if "index" in i:
        words.append(f"index {i['index']}")
    if "nbytes" in i:
        words.append(_size(i["nbytes"]))
    return " ".join(words[:3]) + (" " + ", ".join(words[3:]) if words[3:] else "")


def _size(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 1000 else f"{nbytes / 1e3:.1f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:.2f} MB"
