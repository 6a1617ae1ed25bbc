"""Streaming DiLoCo's fragments and their timetable.

The parameters are cut into P fragments of whole tensors, in model order (a fragment is a
run of layers), balanced by size. Fragment p is sent after inner steps (p + 1) H / P,
(p + 1) H / P + H, ... and its result lands `overlap` steps after it was sent. With P = 1
and no overlap this is plain DiLoCo: everything is sent, and lands, every H steps.

    >>> split([("a", 4), ("b", 4), ("c", 8)], 2)
    [slice(0, 8, None), slice(8, 16, None)]
    >>> s = Schedule(inner_steps=4, fragments=2, overlap=1)
    >>> [(t, s.sends(t), s.lands(t)) for t in range(1, 6)]
    [(1, [], []), (2, [0], []), (3, [], [0]), (4, [1], []), (5, [], [1])]
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_int


def split(sizes, fragments: int) -> list[slice]:
    """Cut tensors of `sizes` ((name, numel) pairs, in model order) into `fragments`
    contiguous groups of whole tensors, as equal in size as the tensors allow; returns the
    slices of the flat parameter vector."""
    fragments = check_int(fragments, "fragments", 1)
    sizes = [int(n) for _, n in sizes]
    if fragments > len(sizes):
        raise ValueError(f"fragments={fragments} does not divide the model: it has only {len(sizes)} parameter "
                         f"tensors, and a fragment holds whole tensors; use fragments <= {len(sizes)}")
    total, cum = sum(sizes), [0]
    for n in sizes:
        cum.append(cum[-1] + n)
    bounds = [0]
    for f in range(1, fragments):
        target = total * f / fragments
        # at least one tensor in this fragment and one for each fragment after it
        choices = range(bounds[-1] + 1, len(sizes) - (fragments - f) + 1)
        bounds.append(min(choices, key=lambda b: (abs(cum[b] - target), b)))
    bounds.append(len(sizes))
    return [slice(cum[a], cum[b]) for a, b in zip(bounds, bounds[1:])]


@dataclass(frozen=True)
class Schedule:
    """When each fragment is sent and when its result lands, counted in inner steps done."""
    inner_steps: int
    fragments: int = 1
    overlap: int = 0

    @property
    def every(self) -> int:
        return self.inner_steps // self.fragments

    def sends(self, t: int) -> list[int]:
        """Fragments sent right after inner step t (t = 1, 2, ...)."""
        if t < 1 or t % self.every:
            return []
        return [(t // self.every - 1) % self.fragments]

    def lands(self, t: int) -> list[int]:
        """Fragments whose exchange lands right after inner step t (the same as `sends`
        without overlap)."""
        return self.sends(t - self.overlap)
