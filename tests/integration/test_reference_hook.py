"""milktea's DDP hook (Top-K 1% + error feedback) trains exactly as the plain-torch reference
hook does (milktea/distributed/reference.py), on 2 gloo ranks: the same weights, bit for bit,
after a few steps, in float32 and in bfloat16."""
import os
import sys

import pytest
import torch

from milktea.distributed import launch

sys.path.insert(0, os.path.dirname(__file__))
pytestmark = pytest.mark.distributed


def train_both(dtype_name: str, steps: int = 4):
    """On each rank: the same model trained once through milktea's hook and once through the
    reference hook, on this rank's data; returns both final weights (rank 0's)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import milktea.ddp
    from milktea import TopK
    from milktea.distributed.reference import TopKReference, topk_hook
    dtype = getattr(torch, dtype_name)
    rank = dist.get_rank()
    out = {}
    for which in ("milktea", "reference"):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10)).to(dtype)
        model = DDP(net, bucket_cap_mb=0.02)
        if which == "milktea":
            state = milktea.ddp.compress(model, TopK(0.05), error_feedback=True, min_size=1024, start_step=0)
        else:
            model.register_comm_hook(TopKReference(0.05, min_size=1024), topk_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for step in range(steps):
            g = torch.Generator().manual_seed(100 * step + rank)
            x, y = torch.randn(16, 64, generator=g).to(dtype), torch.randint(0, 10, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x).float(), y).backward()
            opt.step()
        if which == "milktea":
            state.close()
        out[which] = [p.detach().clone() for p in net.parameters()]
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_hook_trains_as_the_reference_does(dtype):
    res = launch(train_both, 2, args=(dtype,), timeout=240)
    for a, b in zip(res["milktea"], res["reference"]):
        assert torch.equal(a, b), f"{tuple(a.shape)}: the weights differ by {float((a - b).abs().max())}"
