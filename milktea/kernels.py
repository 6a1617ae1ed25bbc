"""Elementwise kernels behind the quantizers, in two versions that agree.

* ``torch`` path: plain tensor ops; runs on any device, used for CUDA and for small
  tensors. On a CPU every op is one pass over memory, so a quantizer written as
  scale -> round -> cast costs several copies of the tensor.
* ``numba`` path (CPU, large tensors): one fused loop per chunk, so quantize+pack
  reads the gradient once. Numba is used for exactly this: it gives a fused,
  multithreaded, SIMD loop from twenty lines of Python, where the alternative is a
  C++ extension that every learner would have to compile.

The two paths give the same bits: ``code = floor(x / scale + qmax + 1.5)`` (round
half up, one IEEE division and one addition in float32, no fused multiply-add),
``scale = absmax / qmax`` (the maximum is exact in any order), and decoding is
``(code - qmax - 1) * scale`` (one rounding; scales are capped so that this stays
finite for chunks whose max is near float32's largest value). Sign's scale is a float64 sum of |x| on both paths, which
differ only in summation order: the float32 scale may differ in its last bit
(checked by the tests); its sign bits are identical.
Set ``MILKTEA_NUMBA=0`` to force the torch path.
"""
from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import torch

from . import buffers
import milktea.threads  # noqa: F401  (sizes this rank's pools before numba, loaded later, starts its own)

NUMBA_MIN_NUMEL = 1 << 16   # below this, JIT start-up costs more than it saves
BLOCK = 1 << 15             # entries per parallel work item of the compiled loops
FOUND_PER_BLOCK = 1 << 11   # positions above a threshold a block keeps in the first pass (6%)
# entries per step of the torch paths (CUDA, small tensors, MILKTEA_NUMBA=0), multiples of 8:
# whole-tensor ops made up to 6x the gradient's size in temporaries (|x| cast to float64, the
# uniforms' hashes); a step's are tens of bytes per entry. A GPU takes larger steps, where
# each op's launch would cost more than its pass over memory.
TORCH_PIECE = 1 << 18
CUDA_PIECE = 1 << 22

# False forces the torch path (MILKTEA_NUMBA=0, or a test); numba itself is imported only
# when a tensor first needs it (see jit), so `import milktea` never pays for it.
USE_NUMBA = os.environ.get("MILKTEA_NUMBA", "1") != "0"


@functools.lru_cache(maxsize=None)
def scale_cap(qmax: int) -> float:
    """The largest float32 scale with qmax * scale finite: scales are clamped to it, so
    that a chunk whose max is near float32's largest value decodes finite."""
    top = np.float32(np.finfo(np.float32).max)
    c = top / np.float32(qmax)
    with np.errstate(over="ignore"):
        while not np.isfinite(c * np.float32(qmax)):
            c = np.nextafter(c, np.float32(0))
    return float(c)


@functools.lru_cache(maxsize=None)
def _load():
    try:  # numba is a dependency, but the library must still work where it cannot load
        threads = torch.get_num_threads()
        from milktea import numba_kernels
        _start_numba_pool()
        # numba's OpenMP layer and torch share one OpenMP runtime: starting numba's pool sets
        # the runtime's thread count to numba's, which would change torch's behind the user's
        # back (a notebook that set torch.set_num_threads(1) found 2 after the first kernel)
        torch.set_num_threads(threads)
        return numba_kernels
    except Exception as e:  # pragma: no cover - depends on the environment
        warnings.warn(f"numba could not load ({type(e).__name__}: {e}); milktea uses its slower "
                      "torch kernels instead", RuntimeWarning, stacklevel=3)
        return None


def _start_numba_pool() -> None:
    """Start numba's thread pool now rather than inside the first kernel, so that whatever it
    does to the shared OpenMP runtime happens here, where `_load` undoes it."""
    try:
        from numba.np.ufunc import parallel
        parallel._launch_threads()
    except Exception:  # pragma: no cover - a numba without this entry point starts it lazily
        pass


def jit(t: torch.Tensor | None = None, numel: int | None = None):
    """The compiled loops (milktea.numba_kernels) if they should run on `t`, else None:
    CPU tensors of at least NUMBA_MIN_NUMEL entries, numba loadable, not switched off.
    Sizes numba's thread pool to torch's whenever torch's changed (a user may change it).

    numel: the size to judge by instead of t's own. Index loops pass the size of the
    tensor the indices address: a 1% selection of a 6M-entry bucket has 63k indices,
    under the threshold, yet the selection itself has loaded numba already."""
    size = t.numel() if numel is None and t is not None else numel
    if not USE_NUMBA or (t is not None and (t.device.type != "cpu" or size < NUMBA_MIN_NUMEL)):
        return None
    nb = _load()
    if nb is not None and torch.get_num_threads() != _threads[0]:    # torch's count changed
        import numba
        _threads[0] = torch.get_num_threads()
        numba.set_num_threads(min(_threads[0], numba.config.NUMBA_NUM_THREADS))
    return nb


_threads = [0]   # torch's thread count numba's pool was last sized to


def would_use_numba(numel: int, device) -> bool:
    """Whether a tensor of `numel` entries on `device` would go through the compiled loops
    (without loading numba to find out: an unloadable numba is found on first use)."""
    return USE_NUMBA and torch.device(device).type == "cpu" and numel >= NUMBA_MIN_NUMEL


def piece(device) -> int:
    """Entries per step of the torch paths on `device` (TORCH_PIECE, CUDA_PIECE off the CPU)."""
    return TORCH_PIECE if torch.device(device).type == "cpu" else CUDA_PIECE


def spans(n: int, device="cpu", first: int = 0):
    """(start, end) of the steps of piece(device) entries that cover range(first, first + n)."""
    step = piece(device)
    return ((s, min(s + step, first + n)) for s in range(first, first + n, step))


def all_finite(t: torch.Tensor) -> bool:
    """torch.isfinite(t).all(), without a temporary as large as t: a NaN or an infinity
    makes the sum non-finite; a sum of finite values can overflow too, so a non-finite
    sum is checked again piece by piece (one device sync either way)."""
    flat = t.reshape(-1)
    total = flat.sum() if flat.dtype in (torch.float32, torch.float64) else flat.sum(dtype=torch.float32)
    if bool(torch.isfinite(total)):
        return True
    ok = torch.ones((), dtype=torch.bool, device=flat.device)
    for s, e in spans(flat.numel(), flat.device):
        ok &= torch.isfinite(flat[s:e]).all()
    return bool(ok)


def quantize(x: torch.Tensor, chunk: int, qmax: int, out_codes: torch.Tensor | None = None):
    """Absmax-quantize a flat float32 tensor chunk by chunk.

    Returns (codes, scales): codes are uint8 in [1, 2*qmax+1] (the signed level plus
    qmax+1), scales are float32, one per chunk, scale = absmax / qmax.
    """
    n = x.numel()
    nch = (n + chunk - 1) // chunk
    codes = buffers.lend(out_codes, n, x.device)
    scales = torch.empty(nch, dtype=torch.float32, device=x.device)
    nb = jit(x)
    if nb is not None:
        nb.quantize(x.numpy(), chunk, qmax, np.float32(scale_cap(qmax)), codes.numpy(), scales.numpy())
        return codes, scales
    full = n - n % chunk
    pieces = [(x[:full].view(-1, chunk), codes[:full].view(-1, chunk), scales[: full // chunk])] if full else []
    if full < n:
        pieces.append((x[full:].view(1, -1), codes[full:].view(1, -1), scales[full // chunk:]))
    for xv, cv, sv in pieces:
        rows = max(1, piece(x.device) // xv.shape[1])   # a step's worth of chunks at a time
        for r in range(0, xv.shape[0], rows):
            xr, cr, sr = xv[r: r + rows], cv[r: r + rows], sv[r: r + rows]
            sr.copy_((torch.linalg.vector_norm(xr, float("inf"), dim=1) / qmax).clamp_(max=scale_cap(qmax)))
            y = torch.div(xr, torch.where(sr > 0, sr, 1.0).unsqueeze(1)).add_(qmax + 1.5)
            cr.copy_(y.to(torch.int32))   # y > 0, so the cast is floor; the result fits a byte
    return codes, scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, chunk: int, qmax: int,
               out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize` into `out` (flat float32), with torch ops: the twin of
    the compiled numba_stochastic.decode (see dequantize_packed, which picks between them)."""
    n = out.numel()
    full = n - n % chunk
    pieces = [(codes[:full].view(-1, chunk), out[:full].view(-1, chunk), scales[: full // chunk])] if full else []
    if full < n:
        pieces.append((codes[full:].view(1, -1), out[full:].view(1, -1), scales[full // chunk:]))
    for cv, ov, sv in pieces:
        ov.copy_(cv).sub_(qmax + 1).mul_(sv.unsqueeze(1))
    return out


def sign_unpack_add(packed: torch.Tensor, scale: float, out: torch.Tensor, alpha: float,
                    div: int = 1) -> bool:
    """out += alpha * sign_unpack(...) in one compiled pass (flat float32 `out`, alpha
    +-1), then out /= div in the same pass where div != 1; False where that does not
    run (the caller adds piece by piece)."""
    ok = alpha in (1.0, -1.0) and out.dtype == torch.float32 and out.is_contiguous()
    nb = jit(out) if ok else None
    if nb is None:
        return False
    nb.sign_into(packed.numpy(), np.float32(scale), out.view(-1).numpy(), -1 if alpha < 0 else 1, np.float32(div))
    return True


def sign_pack_l1(x: torch.Tensor, out: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
    """Sign bits of a flat float32 tensor (1 = negative, 0 for +-0), 8 per byte, and
    sum |x| accumulated in float64. out: a uint8 tensor the compiled loop writes the bits
    into, from its start, where it has room."""
    n = x.numel()
    nb = jit(x)
    if nb is not None:
        out = buffers.lend(out, (n + 7) // 8)
        partial = np.empty((n + BLOCK - 1) // BLOCK, dtype=np.float64)
        nb.sign_pack(x.numpy(), out.numpy(), partial)
        return out, float(partial.sum())
    from .bits import pack
    out = torch.empty((n + 7) // 8, dtype=torch.uint8, device=x.device)
    l1 = torch.zeros((), dtype=torch.float64, device=x.device)
    for s, e in spans(n, x.device):   # s is a multiple of 8: each step's bits are whole bytes of out
        out[s // 8: (e + 7) // 8] = pack((x[s:e] < 0).view(torch.uint8), 1)
        l1 += x[s:e].abs().sum(dtype=torch.float64)
    return out, float(l1)


def add_sign_pack_l1(x: torch.Tensor, add: torch.Tensor, out: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, float] | None:
    """x += add, then sign_pack_l1(x), in one compiled pass over memory (flat float32 x
    and add); a NaN or an infinity in the sum raises ValueError (x then holds the sum).
    None where the compiled loops do not run (the caller adds, then packs)."""
    ok = x.dtype == torch.float32 and add.dtype == torch.float32 and add.numel() == x.numel()
    nb = jit(x) if ok else None
    if nb is None:
        return None
    n = x.numel()
    out = buffers.lend(out, (n + 7) // 8)
    partial = np.empty((n + BLOCK - 1) // BLOCK, dtype=np.float64)
    bad = np.zeros(partial.size, dtype=np.uint8)
    nb.add_sign_pack(x.numpy(), add.reshape(-1).numpy(), out.numpy(), partial, bad)
    if bad.any():
        raise ValueError(_nonfinite_message(x))
    return out, float(partial.sum())


def sign_unpack(packed: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """out[i] = -scale where bit i is set, else +scale (flat float32)."""
    n = out.numel()
    nb = jit(out)
    if nb is not None:
        nb.sign_into(packed.numpy(), np.float32(scale), out.numpy(), 0, np.float32(1))
        return out
    from .bits import unpack
    for s, e in spans(n, out.device):   # s is a multiple of 8: a step's bits start on a byte
        sign_values(unpack(packed[s // 8: (e + 7) // 8], 1, e - s), scale, out[s:e])
    return out


def sign_values(bits: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
    """out = (1 - 2 bits) * scale, as the numba path computes it (no overflow)."""
    return out.copy_(bits).mul_(-2).add_(1).mul_(scale)


def above_threshold(x: torch.Tensor, t: float, add: torch.Tensor | None = None,
                    clear_add: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted int64 positions where |x| >= t, x's values there) for flat x, without a
    full-size temporary.

    add: a tensor like x added to it first, in place (x += add), in the same pass over
    memory where the compiled loops run: error feedback's ledger update and finding the
    candidates (with their values, so that choosing among them reads nothing at random)
    cost one pass over the ledger (blocks denser than FOUND_PER_BLOCK are read a second
    time). A NaN or an infinity in the sum raises ValueError (x then holds the sum).
    clear_add: zero `add` once it is in x, in the same pass (its cache lines are there
    already: measured, this costs next to nothing, where a zero_() after is a pass).
    """
    nb = jit(x) if x.dtype in (torch.float32, torch.float64) else None
    if nb is not None and (add is None or add.dtype == x.dtype):
        xn = x.numpy()      # counts in torch tensors: numpy's sum, any, cumsum are Python functions
        blocks = (x.numel() + BLOCK - 1) // BLOCK
        counts, bad = torch.empty(blocks, dtype=torch.int64), torch.zeros(blocks, dtype=torch.uint8)
        found = np.empty((blocks, FOUND_PER_BLOCK), dtype=np.int32)   # pages touched as written
        found_x = np.empty((blocks, FOUND_PER_BLOCK), dtype=xn.dtype)
        g = add.reshape(-1).numpy() if add is not None else xn[:0]
        nb.collect_above(xn, g, xn.dtype.type(t), clear_add, found, found_x, counts.numpy(), bad.numpy())
        if bool(bad.any()):
            raise ValueError(_nonfinite_message(x))
        starts = torch.cumsum(counts, 0) - counts
        out = torch.empty(int(counts.sum()), dtype=torch.int64)
        vals = torch.empty(out.numel(), dtype=x.dtype)
        nb.gather_above(xn, xn.dtype.type(t), found, found_x, counts.numpy(), starts.numpy(), out.numpy(), vals.numpy())
        return out, vals
    if add is not None:
        add_finite(x, add)
        if clear_add:
            add.zero_()
    found = [(x[s:e].abs() >= t).nonzero().reshape(-1).add_(s) for s, e in spans(x.numel(), x.device)]
    cand = torch.cat(found) if found else torch.empty(0, dtype=torch.int64, device=x.device)
    return cand, x.index_select(0, cand)


def add_finite(x: torch.Tensor, add: torch.Tensor) -> torch.Tensor:
    """x += add in place; ValueError if `add` holds a NaN or an infinity (x is then left
    unchanged) or if the sum overflows."""
    add = add.reshape(x.shape)
    if not all_finite(add):
        raise ValueError(_nonfinite_message(add, "the gradient"))
    x.add_(add)
    if not all_finite(x):
        raise ValueError(_nonfinite_message(x))
    return x


def _nonfinite_message(x: torch.Tensor, what: str = "ledger + gradient") -> str:
    bad = ~torch.isfinite(x)
    return (f"non-finite gradient: {int(bad.sum())} of the {x.numel()} entries of {what} are "
            f"NaN or infinite (first at flat position {int(bad.nonzero()[0])}); lower the learning "
            "rate, clip the gradients, or find the NaN (torch.autograd.set_detect_anomaly)")


def sampled_kth_abs(x: torch.Tensor, add: torch.Tensor | None, pick: torch.Tensor, run: int,
                    k: int) -> float | None:
    """kth_largest_abs of the sample made of the runs of `run` entries of flat float32
    x (+ add) that start at pick * run, read in place; None where the compiled loops do
    not run on a sample of that size (the caller gathers it with torch)."""
    ok = x.dtype == torch.float32 and (add is None or add.dtype == x.dtype) and pick.dtype == torch.int64
    nb = jit(x, pick.numel() * run) if ok else None
    if nb is None:
        return None
    g = add.reshape(-1).numpy() if add is not None else np.empty(0, np.float32)
    key = nb.sampled_kth_abs(x.numpy(), g, pick.numpy(), run, k)
    return float(np.array([key], dtype=np.uint32).view(np.float32)[0])


def index_sizes(idx: torch.Tensor, numel: int) -> tuple[int, int] | None:
    """(delta8 bytes, varint bytes) of sorted unique int64 positions in [0, numel) on the
    CPU, in one compiled pass; None where the compiled loops do not run (see
    milktea.index.sizes)."""
    nb = jit(idx, numel) if idx.dtype == torch.int64 else None
    if nb is None:
        return None
    d8, vi = nb.index_sizes(idx.numpy())
    return int(d8), int(vi)


def sparse_mean(pieces: list[tuple[torch.Tensor, torch.Tensor]], out: torch.Tensor) -> bool:
    """out.view(-1) = the mean of sparse packets given as (sorted unique int64 indices,
    values in out's dtype), with `out` zeroed by the caller; one compiled merge of the
    sorted lists that writes each position once. Same bits as the torch way: the first
    packet's values put in place, the others added in order, then divided by their
    count. False where the compiled loops do not run (the caller has the torch way)."""
    nb = jit(out) if out.dtype in (torch.float32, torch.float64) else None
    if nb is None:
        return False
    for i, v in pieces:
        if i.dtype != torch.int64 or v.dtype != out.dtype:
            return False
    offs, idx, vals = np.zeros(len(pieces) + 1, dtype=np.int64), [], []
    for w, (i, v) in enumerate(pieces):
        offs[w + 1] = offs[w] + i.numel()
        idx.append(i)
        vals.append(v)
    flat = out.view(-1).numpy()
    nb.sparse_mean(torch.cat(idx).numpy(), torch.cat(vals).numpy(), offs, np.array([len(pieces)], flat.dtype), flat)
    return True


def topk_among(cand: torch.Tensor, vals: torch.Tensor, k: int, numel: int
               ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the k of the sorted positions `cand` whose values `vals` (float32, one per
    candidate) are largest in magnitude, ties to the lowest position, sorted; their
    values); None where the compiled loops do not run on a tensor of `numel` entries,
    the one the candidates come from (the caller has the torch version). 1 <= k <= len(cand)."""
    ok = vals.dtype == torch.float32 and cand.dtype == torch.int64 and cand.numel() == vals.numel()
    nb = jit(vals, numel) if ok else None
    if nb is None:
        return None
    out = torch.empty(k, dtype=torch.int64)
    out_vals = torch.empty(k, dtype=torch.float32)
    nb.topk_among(vals.numpy().view(np.uint32), cand.numpy(), k, out.numpy(), out_vals.numpy().view(np.uint32))
    return out, out_vals


def zero_at(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x.view(-1)[idx] = 0 for sorted int64 positions (error feedback crossing out what it
    sent), in a compiled loop where it runs, else index_fill_."""
    flat = x.view(-1)
    nb = jit(flat) if idx.dtype == torch.int64 and idx.device == flat.device else None
    if nb is None:
        return flat.index_fill_(0, idx, 0)
    nb.zero_at(flat.numpy(), idx.numpy())
    return flat


def quantize_packed(x: torch.Tensor, chunk: int, bits: int, out: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Absmax-quantize a flat float32 tensor to `bits`-bit codes, packed (see bits.pack),
    written into `out` from its start where it has room (else a new tensor)."""
    from .bits import pack
    qmax = 2 ** (bits - 1) - 1
    nb = jit(x) if bits < 8 and ((chunk * bits) % 8 == 0 or chunk >= x.numel()) else None
    if nb is not None:
        n = x.numel()
        out = buffers.lend(out, (n * bits + 7) // 8)
        scales = torch.empty((n + chunk - 1) // chunk, dtype=torch.float32)
        nb.quantize_packed(x.numpy(), chunk, qmax, np.float32(scale_cap(qmax)), bits, out.numpy(), scales.numpy())
        return out, scales
    codes, scales = quantize(x, chunk, qmax, out if bits == 8 else None)    # 8-bit codes are their own packing
    return pack(codes, bits), scales
