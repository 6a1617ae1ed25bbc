"""Your own model on DDP, its gradient sent as the top 1% with error feedback.

    torchrun --nproc-per-node 2 examples/ddp_own_model.py      # or: python examples/ddp_own_model.py

Any nn.Module works; here a small transformer that the hook knows nothing about
(milktea.gpt), trained on Python source with SGD, the momentum kept in the hook (DGC's
momentum correction): error feedback feeding Adam(W) is unsound (chapter 05). LayerNorms and
biases (< 1024 numbers) cross dense; every matrix goes as a Top-1% packet. The README shows this file's code.
"""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import milktea.ddp
from milktea import TopK
from milktea.tasks import CharGPT

if "RANK" in os.environ:                             # under torchrun: it set RANK, WORLD_SIZE, ...
    dist.init_process_group("gloo")
else:                                                # as a plain script: a world of one
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
rank = dist.get_rank()
task = CharGPT(seed=0)                               # the same initial weights on every rank
model = DDP(task.model())
state = milktea.ddp.compress(model, TopK(ratio=0.01), error_feedback=True, momentum=0.9)
opt = torch.optim.SGD(model.parameters(), lr=0.3)          # the momentum lives in the hook (DGC)
x, y = task.shard(rank, dist.get_world_size())      # this rank's windows of text
gen = torch.Generator().manual_seed(rank)
for _ in range(20):
    idx = torch.randint(len(y), (16,), generator=gen)
    opt.zero_grad()
    task.loss(model(x[idx]), y[idx]).mean().backward()   # the hook runs during backward
    opt.step()
if rank == 0:
    print(f"{state.stats.last.ratio:.1f}x smaller per step; validation {task.evaluate(model.module)}")
state.close()
dist.destroy_process_group()
milktea.ddp.end_script()   # flush, then leave at once: a normal exit can abort in gloo's threads
