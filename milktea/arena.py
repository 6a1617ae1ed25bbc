"""Where a packet's large byte parts are allocated: in a buffer the caller lends, or anew.

The DDP hook lays this rank's packets end to end in a send buffer it keeps between steps.
A compressor that writes a full-size byte part (int8 codes, sign bits) asks `empty` for
it; inside `parts_into(buf)` the part is carved from `buf` (the room after the packets
already written), so the codes land next to where the packet will go and no full-size
temporary is made per step. Anywhere else (the simulator, a user's own call) `empty`
is `buffers.empty` (a large one on huge pages). Whatever `empty` returned, the packet is
still placed byte for byte (`Packet.write_into`): a part carved elsewhere is copied, one
in place is moved.

>>> buf = torch.zeros(16, dtype=torch.uint8)
>>> with parts_into(buf):
...     a = empty(4)
>>> a.data_ptr() == buf.data_ptr(), empty(4).data_ptr() == buf.data_ptr()
(True, False)
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from . import buffers

_local = threading.local()


@contextmanager
def parts_into(buf: torch.Tensor | None):
    """Carve the `empty` calls of this thread from `buf` (1-D uint8), in order, while
    there is room; None: no buffer (every call allocates)."""
    saved = getattr(_local, "buf", None), getattr(_local, "used", 0)
    _local.buf, _local.used = buf, 0
    try:
        yield
    finally:
        _local.buf, _local.used = saved


def empty(nbytes: int, device=None) -> torch.Tensor:
    """An uninitialised 1-D uint8 tensor of `nbytes` bytes: from the lent buffer where one
    is lent on this thread, on the same device, with room left; else new."""
    buf = getattr(_local, "buf", None)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if buf is not None and buf.device == dev and _local.used + nbytes <= buf.numel():
        out = buf[_local.used: _local.used + nbytes]
        _local.used += nbytes
        return out
    return buffers.empty(nbytes, torch.uint8, dev)
