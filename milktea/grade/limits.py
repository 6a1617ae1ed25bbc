"""How much one submission may use: CPU time, memory, files, processes, output.

Time limits are CPU seconds, measured by the grader on every process of the child's world, so a
correct submission gets the same grade on an idle machine and on a loaded one. A child that
waits instead of computing (a sleep, a blocked read) is stopped by the wall clock, at
`wall_factor` times the CPU limit.

    >>> Limits().wall(Limits().task_seconds)
    50.0
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    task_seconds: float = 10.0          # CPU seconds of one graded task (public cases, then hidden ones), or one cell
    submission_seconds: float = 120.0   # CPU seconds of one submission, restarts included
    wall_factor: float = 5.0            # wall-clock limits: this times the CPU limit (a child that only waits)
    startup_seconds: float = 60.0       # starting Python + numpy (+ torch): not student time
    memory_mb: int = 2048               # address space the child may add after importing numpy/torch
    file_mb: int = 16                   # largest file the child may write in its temp dir
    max_output: int = 16 << 20          # bytes of plain data per returned value
    tmp_mb: int = 64                    # size of an isolated child's private /tmp (it is memory)
    processes: int = 32                 # processes + threads of an isolated child (RLIMIT_NPROC)

    def __post_init__(self):
        for name in ("task_seconds", "submission_seconds", "wall_factor", "startup_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
                raise ValueError(f"Limits.{name} must be a number of seconds > 0, not {value!r}")
        if self.wall_factor < 1:
            raise ValueError("Limits.wall_factor must be >= 1: wall-clock time is never less than CPU time")
        for name in ("memory_mb", "file_mb", "max_output", "tmp_mb", "processes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be an int > 0, not {value!r}")

    def wall(self, cpu_seconds: float) -> float:
        """The wall-clock limit that goes with a CPU limit."""
        return float(cpu_seconds) * self.wall_factor
