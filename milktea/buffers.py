"""Fresh output buffers that do not cost a page fault per 4 KiB.

A compressor's packet and a decoder's output are new tensors on every call, and a large
new tensor is new memory from the system: the first write to each 4 KiB page faults into
the kernel, which zeroes it. For a 100 MB gradient that costs more than copying it (on a
virtual machine, several times more). `empty` asks Linux for transparent huge pages on
such a buffer before anything touches it (madvise MADV_HUGEPAGE, honoured where the
system's THP setting is "madvise" or "always"): one fault per 2 MiB instead of 512. It
changes nothing else in the process (torch's own allocations are left as they are), and
where the call is not available it is a plain torch.empty.

>>> import torch
>>> empty(10, torch.float32).shape
torch.Size([10])
"""
from __future__ import annotations

import ctypes
import functools
import sys

import torch

HUGE = 1 << 21              # a huge page; smaller buffers are left alone
MADV_HUGEPAGE = 14          # <sys/mman.h> on Linux


@functools.lru_cache(maxsize=None)
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):   # pragma: no cover - a libc without madvise
        return None
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


def advise(t: torch.Tensor) -> torch.Tensor:
    """Ask for huge pages under t's storage (CPU, at least 2 MiB; else nothing); return t."""
    nbytes = t.numel() * t.element_size()
    if t.device.type != "cpu" or nbytes < 2 * HUGE:
        return t
    f = _madvise()
    if f is not None:
        start = (t.data_ptr() + 4095) & ~4095          # whole pages inside the buffer only
        end = (t.data_ptr() + nbytes) & ~4095
        f(start, end - start, MADV_HUGEPAGE)            # a refusal (old kernel, THP off) is harmless
    return t


def empty(shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype, device=device), with huge pages for a large CPU buffer."""
    return advise(torch.empty(shape, dtype=dtype, device=device))


def lend(buf: torch.Tensor | None, nbytes: int, device=None) -> torch.Tensor:
    """`nbytes` bytes from the start of the uint8 tensor `buf` (a buffer the caller lends,
    e.g. the DDP hook's send buffer) where it has room on `device`, else a new one.

    >>> room = torch.zeros(8, dtype=torch.uint8)
    >>> lend(room, 4).data_ptr() == room.data_ptr(), lend(room, 9).numel()
    (True, 9)
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if buf is not None and buf.device == dev and buf.numel() >= nbytes:
        return buf[:nbytes]
    return empty(nbytes, torch.uint8, dev)
