"""What a graded task is, and how a returned value is compared with the reference.

A `Task` names the function a learner writes, its points, the cases it is called on
(fixed edge cases plus fresh random ones from a seed) and a comparator. A comparator
returns None when the answer is right, else one sentence in a learner's words.

    >>> close = number(rtol=1e-6)
    >>> close(2.0, 2.0, ()) is None, close(2.0, 3, ())
    (True, 'expected 2, got 3')
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..i18n import _


@dataclass
class Case:
    """One call of a graded function: `fn(*args, **kwargs)`; `label` says what it tests."""
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")


@dataclass
class Task:
    """One graded function of an assignment, as its tests file declares it.

    `cases(rng, ref)` returns the public cases (fixed edge cases plus random ones drawn from
    `rng`; `ref` maps the reference functions by name, for inputs built from another task's
    answer); `compare(expected, got, args)` returns None or one sentence. `params` names the
    arguments in messages (default: the reference function's own). `title` defaults to the
    heading above the task's cell in the master notebook. `reveal=False` ships only hashes of
    the public expected outputs to students (values rounded to `digits` significant digits)
    and keeps every expected value out of feedback, for tasks whose output is the answer.
    `visibility` is the Gradescope visibility of the hidden tests' result. `harness`: Python
    source defining `run(fn, *args, **kwargs)`, the grader's own code that calls the learner's
    function (a communication hook run on a fake bucket and group, say); it runs next to the
    learner's code but comes from the tests file, never from the notebook, so a learner can't
    change how the function is called.

        >>> Task("1.1", "double", 2, lambda rng, ref: [Case("one", (1,))], number()).points
        2
    """
    id: str                    # "03.1"
    function: str              # the name the learner must keep
    points: float
    cases: Callable[[np.random.Generator, dict], list]   # (rng, reference functions) -> [Case]
    compare: Callable[[Any, Any, tuple], "str | None"]
    params: tuple = ()         # argument names, for messages
    title: str = ""
    reveal: bool = True
    digits: int = 6
    visibility: str = "after_due_date"
    harness: str = ""

    def __post_init__(self):
        if not isinstance(self.id, str) or not re.fullmatch(r"[A-Za-z0-9][\w.-]{0,39}", self.id):
            raise ValueError(f"task id {self.id!r}: use letters, digits, '.', '_' or '-' (e.g. '03.1')")
        if not isinstance(self.function, str) or not self.function.isidentifier():
            raise ValueError(f"task {self.id}: function must be a Python name, not {self.function!r}")
        if isinstance(self.points, bool) or not isinstance(self.points, (int, float)) \
                or not (0 < self.points < float("inf")):
            raise ValueError(f"task {self.id}: points must be a number > 0, not {self.points!r}")
        if not callable(self.cases) or not callable(self.compare):
            raise TypeError(f"task {self.id}: cases and compare must be functions")
        if self.visibility not in VISIBILITIES:
            raise ValueError(f"task {self.id}: visibility must be one of {', '.join(VISIBILITIES)}, "
                             f"not {self.visibility!r}")
        if not isinstance(self.digits, int) or not 1 <= self.digits <= 15:
            raise ValueError(f"task {self.id}: digits must be an int from 1 to 15")
        self.params = tuple(self.params)
        if not isinstance(self.harness, str):
            raise TypeError(f"task {self.id}: harness must be Python source (a str) defining run(fn, *args)")


# --- showing values in messages ---------------------------------------------------------

def show(value, limit: int = 6) -> str:
    """A short, readable rendering of a value for feedback."""
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        items = ", ".join(_num(v) for v in flat[:limit]) + (", ..." if flat.size > limit else "")
        return _("{dtype} array of shape {shape} [{items}]").format(dtype=value.dtype, shape=tuple(value.shape),
                                                                   items=items)
    if isinstance(value, (bytes, bytearray)):
        return _("{n} bytes {hex}").format(n=len(value), hex=bytes(value[:limit]).hex(" ")
                                           + (" ..." if len(value) > limit else ""))
    if isinstance(value, (list, tuple)):
        if len(value) > limit:
            return _("a list of {n} items").format(n=len(value))
        inner = ", ".join(show(v, limit) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, float, np.integer, np.floating)):
        return _num(value)
    if isinstance(value, dict):
        return _("a dict with keys {keys}").format(keys=", ".join(map(str, list(value)[:limit])))
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def _num(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{float(v):.6g}"


def call_text(function: str, params: tuple, case: Case) -> str:
    names = list(params) + [f"arg{i}" for i in range(len(params), len(case.args))]
    parts = [f"{n}={show(a)}" for n, a in zip(names, case.args)]
    parts += [f"{k}={show(v)}" for k, v in case.kwargs.items()]
    return f"{function}({', '.join(parts)})"


# --- comparators --------------------------------------------------------------------------

def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def number(rtol: float = 1e-9, atol: float = 1e-12):
    """A single number, close to the reference; inf matches inf."""
    def compare(expected, got, args):
        if isinstance(got, np.ndarray) and got.size == 1 and got.dtype.kind in "iuf":
            got = got.item()
        if not _is_number(got):
            return _("expected a number, got {v}").format(v=show(got))
        e, g = float(expected), float(got)
        if e == g or (np.isfinite(e) and np.isfinite(g) and abs(e - g) <= atol + rtol * abs(e)):
            return None
        return _("expected {v}, got {v2}").format(v=_num(e), v2=_num(g))
    return compare


def array(dtype=None, rtol: float = 0.0, atol: float = 0.0, same_dtype_as: int | None = None):
    """An array with the reference's shape, its values equal (or close with rtol/atol).
    `dtype` (or the dtype of positional argument `same_dtype_as`) must match exactly: on the
    wire the dtype is the byte count."""
    def compare(expected, got, args):
        want = np.dtype(dtype) if dtype is not None else (
            np.asarray(args[same_dtype_as]).dtype if same_dtype_as is not None else None)
        if isinstance(got, list) and want is None:
            try:
                got = np.asarray(got, dtype=float)
            except (ValueError, TypeError):
                return _("expected an array, got {v}").format(v=show(got))
        if not isinstance(got, np.ndarray):
            return _("expected a numpy array, got {v}").format(v=show(got))
        if want is not None and got.dtype != want:
            return _("expected dtype {want}, got {dtype}").format(want=want, dtype=got.dtype)
        if got.shape != expected.shape:
            return _("expected shape {v}, got shape {v2}").format(v=tuple(expected.shape), v2=tuple(got.shape))
        e, g = expected.astype(np.float64), got.astype(np.float64)
        bad = ~((e == g) | (np.isfinite(e) & (np.abs(e - g) <= atol + rtol * np.abs(e))))
        if not bad.any():
            return None
        where = np.argwhere(bad)[0]
        at = "[" + ", ".join(map(str, where)) + "]"
        return (_("entry {at}: expected {v}, got {v2} ({v3} of {size} entries differ)").format(at=at, v=_num(expected[tuple(where)]), v2=_num(got[tuple(where)]), v3=int(bad.sum()), size=bad.size))
    return compare


def several(*parts, names: tuple = ()):
    """A tuple (or list) of values, each with its own comparator."""
    names = names or tuple(f"item {i}" for i in range(len(parts)))

    def compare(expected, got, args):
        if not isinstance(got, (list, tuple)) or len(got) != len(parts):
            return _("expected a tuple ({v}), got {v2}").format(v=', '.join(_(n) for n in names), v2=show(got))
        for name, cmp, e, g in zip(names, parts, expected, got):
            problem = cmp(e, g, args)
            if problem:
                return f"{_(name)}: {problem}"
        return None
    return compare


def byte_array():
    """Encoded bytes: a uint8 array (bytes objects are accepted too), equal byte for byte."""
    exact = array(dtype=np.uint8)

    def compare(expected, got, args):
        if isinstance(got, (bytes, bytearray)):
            got = np.frombuffer(bytes(got), dtype=np.uint8)
        if isinstance(got, np.ndarray) and got.dtype == np.uint8 and got.shape != expected.shape:
            return (_("expected {size} bytes, got {size2}: expected {v}, got {v2}").format(size=expected.size, size2=got.size, v=show(expected, 12), v2=show(got, 12)))
        return exact(expected, got, args)
    return compare
