"""The compute of one training step alone: the model and data of a run under DDP with a
hook that communicates nothing, timed phase by phase (what the cost model adds to the link
time), and error feedback's least memory work beside it (`python -m milktea compare`)."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from milktea.distributed.train import TrainConfig, _batches, _sync, device_for_rank
from milktea.timing import median


def _local_hook(state, bucket):  # no annotations: DDP checks them
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


class ComputeProbe:
    """The same model and data under DDP with a hook that communicates nothing: times
    forward (with zero_grad), backward (with DDP's bucketing) and optimizer step, the
    compute the cost model adds to the link time. Stepped between the schemes in a
    comparison, it sees the same load on the cores as they do."""

    def __init__(self, cfg: TrainConfig):
        from torch.nn.parallel import DistributedDataParallel as DDP
        from milktea.tasks import make_task
        self.device = device_for_rank()
        self.task = make_task(cfg.task, hidden=cfg.hidden, seed=cfg.seed)
        x, y = self.task.shard(dist.get_rank(), dist.get_world_size())
        net = self.task.model().to(self.device)
        self.model = DDP(net, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                         bucket_cap_mb=cfg.bucket_cap_mb, gradient_as_bucket_view=True)
        self.model.register_comm_hook(None, _local_hook)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.data = _batches(x.to(self.device), y.to(self.device), cfg.batch, cfg.seed, dist.get_rank())
        self.history: list[dict] = []
        # error feedback's least memory traffic per step, timed beside the compute: a ledger
        # as large as the model, the gradient added into it, the gradient's buffer rewritten
        n = sum(p.numel() for p in net.parameters())
        self._ledger = torch.zeros(n, device=self.device)
        self._grad = torch.zeros(n, device=self.device)
        self.floor_history: list[float] = []

    def step(self) -> dict:
        xb, yb = next(self.data)
        t = [time.perf_counter()]
        self.opt.zero_grad(set_to_none=True)   # DDP re-points .grad at its bucket: no zeroing pass
        loss = self.task.loss(self.model(xb), yb).mean()
        for work in (lambda: None, loss.backward, self.opt.step):
            work()
            _sync(self.device)
            t.append(time.perf_counter())
        rec = {"forward_s": t[1] - t[0], "backward_s": t[2] - t[1], "optimizer_s": t[3] - t[2]}
        self.history.append(rec)
        t0 = time.perf_counter()
        self._ledger.add_(self._grad)
        self._grad.zero_()
        _sync(self.device)
        self.floor_history.append(time.perf_counter() - t0)
        return rec

    def median(self, skip: int = 2) -> dict:
        """Median of each phase over the steps after `skip` warm-up steps."""
        rows = self.history[skip:] or self.history
        return {k: median(r[k] for r in rows) for k in rows[0]}

    def floor(self, skip: int = 2) -> float:
        """Median seconds of error feedback's least memory work per step on this rank, with
        every rank doing the same at once: the ledger += the gradient (read two model-sized
        buffers, write one) and the gradient's buffer rewritten (where the mean lands). No
        error-feedback scheme's codec can take less on this machine, whatever it selects."""
        rows = self.floor_history[skip:] or self.floor_history
        return median(rows)
