"""Where milktea meets torchft: the import (only when a fault-tolerant run starts), the
process group the reports cross, and the all-gather of a quorum's reports over it.

torchft brings the quorums (its lighthouse), the reconfigurable process groups, the
commit protocol and the recovery of a rejoining group from a peer; milktea brings what
crosses: each group's pseudo-gradient through its compressor and ledger. torchft's own
`Manager.allreduce` sums tensors, which an int8 or Top-K packet cannot be (each packet has
its own scale, its own positions), so the packets are all-gathered instead, on the same
process group, and a failure is reported to the Manager exactly as its all-reduce reports
one: the step is not committed anywhere, and the quorum is formed again.

    >>> header(group=2, tokens=128, healed=False, nbytes=40).tolist()
    [2, 128, 0, 40]
"""
from __future__ import annotations

import importlib.util
import os

import torch

TORCHFT = "torchft==0.2.0"
HEADER = 4          # int64 words before each report: group, tokens, healed (0/1), packet bytes


def require():
    """torchft's modules, or an ImportError that says how to install it."""
    try:
        import torchft.manager  # noqa: F401
        import torchft.process_group  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"fault-tolerant runs (milktea.local.ft, python -m milktea.local --ft) run on torchft, which is not "
            f"installed here ({e}). Install it with: pip install '{TORCHFT}' (a wheel for Python 3.11 on Linux "
            f"x86-64; it needs torch>=2.7), or the course's extra: pip install -e '.[course]'") from None
    import torchft
    return torchft


def available() -> bool:
    return importlib.util.find_spec("torchft") is not None


def extension_path() -> str:
    """The file of torchft's compiled extension (LighthouseServer lives there), found
    without importing the torchft package, whose __init__ imports torch: the lighthouse
    process loads this file alone and starts in 0.05 s of CPU instead of 3 (on a 2-core
    machine that starts the groups at the same time)."""
    spec = importlib.util.find_spec("torchft")
    if spec is None or not spec.submodule_search_locations:
        require()
    folder = spec.submodule_search_locations[0]
    names = [n for n in os.listdir(folder) if n.startswith("_torchft") and n.endswith(".so")]
    if not names:
        raise ImportError(f"torchft in {folder} has no compiled _torchft extension; reinstall {TORCHFT}")
    return os.path.join(folder, names[0])


def group_class(device: torch.device | None):
    """torchft's process group for tensors on `device`: ProcessGroupNCCL on CUDA,
    ProcessGroupGloo otherwise (`milktea.device.backend_for`, the rule of every run)."""
    from torchft.process_group import ProcessGroupGloo, ProcessGroupNCCL

    from ...device import backend_for
    return ProcessGroupNCCL if device is not None and backend_for(device) == "nccl" else ProcessGroupGloo


def process_group(timeout_s: float, device: torch.device | None = None):
    """torchft's reconfigurable process group for a replica group whose tensors live on
    `device` (the library's one rule, `milktea.device.backend_for`: NCCL on CUDA, gloo
    otherwise), which also remembers each quorum it is configured for: its id and the
    replica groups in it (torchft's `global_ranks`: a group's id, as each group here has
    one rank)."""
    from datetime import timedelta

    class Recorded(group_class(device)):
        quorum_id, members = -1, []

        def configure(self, store_addr, replica_id, rank, world_size, quorum_id=None, group_rank=None,
                      group_world_size=None, global_ranks=None):
            self.quorum_id, self.members = quorum_id, sorted(global_ranks or [])
            super().configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank, group_world_size,
                              global_ranks)

    return Recorded(timeout=timedelta(seconds=timeout_s))


def header(group: int, tokens: int, healed: bool, nbytes: int) -> torch.Tensor:
    return torch.tensor([group, tokens, int(healed), nbytes], dtype=torch.int64)


def allgather_reports(pg, head: torch.Tensor, data: torch.Tensor) -> list[tuple[list[int], torch.Tensor]]:
    """Every quorum member's (header, report bytes), in the process group's order: the
    headers first (fixed size), then the reports padded to the longest. Raises what the
    process group raises when a member is lost (the caller reports it to the Manager)."""
    from torch.distributed.distributed_c10d import AllgatherOptions
    world, dev = pg.size(), data.device
    head = head.to(dev)
    heads = [torch.empty_like(head) for _ in range(world)]
    pg.allgather([heads], [head], AllgatherOptions()).wait()
    heads = [h.cpu().tolist() for h in heads]
    width = max(h[3] for h in heads)
    if width == 0:
        return [(h, data[:0]) for h in heads]
    send = torch.zeros(width, dtype=torch.uint8, device=dev)
    send[:data.numel()] = data
    outs = [torch.empty(width, dtype=torch.uint8, device=dev) for _ in range(world)]
    pg.allgather([outs], [send], AllgatherOptions()).wait()
    return [(h, o[:h[3]]) for h, o in zip(heads, outs)]
