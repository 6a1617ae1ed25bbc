"""Functions that the distributed tests run inside worker processes (must be importable)."""
import os
import time

import torch
import torch.distributed as dist


def rank_sum():
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(),
            "threads": torch.get_num_threads(), "pid": os.getpid()}


def fail_on(rank_to_fail, pid_dir=None):
    """rank_to_fail raises; the others block in a collective that can never finish."""
    if pid_dir:
        open(os.path.join(pid_dir, str(os.getpid())), "w").close()
    if dist.get_rank() == rank_to_fail:
        time.sleep(0.2)
        raise ValueError(f"boom on purpose in rank {rank_to_fail}")
    dist.barrier()
    time.sleep(600)


def exit_hard(rank_to_die):
    if dist.get_rank() == rank_to_die:
        os._exit(7)
    dist.barrier()
    time.sleep(600)
