"""Worker-side helpers for tests/integration/test_local_dist.py (the launcher's workers
import them: functions in a test file would be imported under pytest's rewriting)."""
import os
import signal


def die_at(rank: int, step: int):
    """An on_step callback: rank `rank` is killed (SIGKILL, no word to anyone) after inner step `step`."""
    return _Killer(rank, step)


class _Killer:
    def __init__(self, rank, step):
        self.rank, self.step = rank, step

    def __call__(self, run):
        if run.rank == self.rank and run.core.t == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
