"""Local steps that survive real failures: milktea's compressed pseudo-gradients on torchft.

torchft (meta-pytorch/torchft) keeps replica groups in step across failures: a lighthouse
forms a quorum of the live groups at each exchange, a group that stops heartbeating is
left out after a timeout, the exchange runs on process groups rebuilt for each quorum, an
outer step is committed only where every member's collective succeeded, and a group that
comes back receives a live peer's state. milktea brings what crosses: each group's
pseudo-gradient through its compressor (fp32, int8, Top-K with error feedback as
SparseLoCo sends it) and its ledger, the bytes counted, the same `DiLoCo` scheme as the
simulator and `torchrun` (`milktea.local`). What a rejoining group receives and what it
rebuilds (its ledger: from zero) is said in `milktea.local.ft.group`.

    python -m milktea.local --ft --groups 3 --task gpt --inner-steps 20 --steps 600 --bits 8 --kill 2:5:10

starts a lighthouse and three groups on this machine, kills group 2 halfway through outer
step 5 and restarts it 10 s later, and writes the quorum log (`milktea.local.ft.log`) to
its folder. From Python: `run(...)` or `start(...)` then `.wait()`. torchft is imported
only when a run starts (pip install torchft==0.2.0, or the course extra).

    >>> Kill(group=2, at_step=5, restart_after=10.0).group
    2
"""
from .config import FTConfig, Kill
from .launch import FTError, FTJob, run, start
from .lighthouse import LighthouseUnreachable
from .log import FTResult

__all__ = ["FTConfig", "FTError", "FTJob", "FTResult", "Kill", "LighthouseUnreachable", "run", "start"]
