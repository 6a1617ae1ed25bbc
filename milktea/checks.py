"""Input checks shared by every public function.

Each error says what was wrong *and* what to change, so a learner can fix the
call without reading library code.
"""
from __future__ import annotations

import math

import numpy as np
import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
NONFINITE_POLICIES = ("raise", "zero", "ignore")


def check_grad(t, name: str = "tensor", nonfinite: str = "raise") -> torch.Tensor:
    """Validate a gradient-like tensor and return it (possibly cleaned).

    nonfinite: "raise" (default) fails on NaN/Inf, "zero" replaces them by 0 in a
    copy, "ignore" passes them through untouched.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}; "
                        f"wrap it with torch.as_tensor(...)")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; compressors take float32, float16, "
                        f"bfloat16 or float64 gradients (use .float())")
    if t.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape with no values, as a model built on "
                         f"device='meta' has); compress a real tensor: materialize the model first "
                         f"(model.to_empty(device='cpu') and load its weights)")
    if t.layout != torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; compressors take dense tensors (use .to_dense())")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); there is nothing to compress")
    if nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")
    if nonfinite != "ignore":
        # One fast reduction: NaN/Inf make the sum non-finite. A sum of finite values
        # can overflow too, so a non-finite sum is only a hint, checked exactly below.
        s = t.sum() if t.dtype in (torch.float32, torch.float64) else t.sum(dtype=torch.float32)
        if not torch.isfinite(s):
            bad = ~torch.isfinite(t)
            nbad = int(bad.sum())
            if nbad:
                if nonfinite == "raise":
                    first = int(bad.reshape(-1).nonzero()[0])
                    raise ValueError(
                        f"{name} has {nbad} non-finite value(s) (NaN/Inf), first at flat index "
                        f"{first}; fix the loss/learning rate, or pass nonfinite='zero' to drop them")
                t = torch.where(bad, torch.zeros((), dtype=t.dtype, device=t.device), t)
    return t


def real(value):
    """`value` as a Python int or float if it is a real number, else None: any
    `numbers.Real` (Python's, numpy's scalars, fractions) and 0-d numpy arrays or torch
    tensors of a real dtype, on any device that holds data. Booleans are not numbers here.

    >>> real(np.float32(0.5)), real(torch.tensor(3)), real(True), real("1")
    (0.5, 3, None, None)
    """
    import numbers
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype == torch.bool or value.is_complex() or value.is_meta:
            return None
        return value.item()
    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "iuf":
            return None
        return value.item()
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def _shown(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def check_ratio(ratio, name: str = "ratio") -> float:
    """`ratio` as a float in (0, 1], the share of entries kept (any real number type).

    >>> check_ratio(np.float32(0.25))
    0.25
    """
    r = real(ratio)
    if r is None:
        raise TypeError(f"{name} must be a number in (0, 1] (the share of elements kept, e.g. 0.01), got "
                        f"{_shown(ratio)}")
    r = float(r)
    if not (0.0 < r <= 1.0):
        raise ValueError(f"{name} must be in (0, 1] (the share of elements kept), got {r:g}; "
                         f"for 1% use {name}=0.01")
    return r


def check_k(k, numel: int) -> int:
    k = check_int(k, "k")
    if not 1 <= k <= numel:
        raise ValueError(f"k={k} is out of range for a tensor of {numel} elements; "
                         f"choose 1 <= k <= {numel}")
    return k


def resolve_k(ratio, k, numel: int) -> int:
    """Number of elements to keep from either a ratio or an explicit k."""
    if k is not None:
        return check_k(k, numel)
    return max(1, min(numel, int(round(check_ratio(ratio) * numel))))


def check_choice(value, choices, name: str):
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_int(value, name: str, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int: TypeError if it is not an integer (bool refused), ValueError if
    it lies outside [low, high]. Every integer setting in the library is checked here.

    >>> check_int(3, "steps", 1)
    3
    >>> check_int(0, "steps", 1)
    Traceback (most recent call last):
    ...
    ValueError: steps must be >= 1, got 0
    """
    v = real(value)
    if not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {_shown(value)}")
    value = v
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def check_number(value, name: str, low: float | None = None, high: float | None = None, *,
                 open_low: bool = False, open_high: bool = False) -> float:
    """`value` as a finite float: TypeError if it is not a real number (bool refused),
    ValueError if it is NaN, infinite or outside the range (`open_low`: > low, not >=).

    >>> check_number(0.5, "lr", 0, open_low=True)
    0.5
    >>> check_number(float("nan"), "lr")
    Traceback (most recent call last):
    ...
    ValueError: lr must be finite, got nan
    """
    v = real(value)
    if v is None:
        raise TypeError(f"{name} must be a number, got {_shown(value)}")
    value = float(v)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value <= low if open_low else value < low):
        raise ValueError(f"{name} must be {'>' if open_low else '>='} {low:g}, got {value:g}")
    if high is not None and (value >= high if open_high else value > high):
        raise ValueError(f"{name} must be {'<' if open_high else '<='} {high:g}, got {value:g}")
    return value


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    return check_int(value, name, minimum)


#: seeds go to torch.Generator.manual_seed, which takes at most 64 bits; milktea keeps them below 2**63
MAX_SEED = (1 << 63) - 1


def check_seed(seed, name: str = "seed") -> int:
    """A random seed: an int in [0, 2**63).

    >>> check_seed(np.int64(7))
    7
    """
    return check_int(seed, name, 0, MAX_SEED)
