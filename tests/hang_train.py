"""`python -m milktea.train` whose rank 1 stops inside its training step 5 (a sleep before the
step's work; its peer then waits in that step's collective). Run as a script, under torchrun
or with --workers, by tests/integration/test_launch.py: the launcher's children import it as
their main module, so the patch below reaches them too."""
import os
import time

import torch.distributed as dist

from milktea.distributed import train as T
from milktea.distributed.worker import end_process

_step = T.Run.step


def stalling_step(self):
    if dist.get_rank() == 1 and len(self.records) == 5:
        time.sleep(3600)
    return _step(self)


T.Run.step = stalling_step

if __name__ == "__main__":
    T.main()
    if "RANK" in os.environ:
        end_process(0)
