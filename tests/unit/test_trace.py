"""MILKTEA_DEBUG=1 prints the path a bucket takes through the real DDP hook, the one
docs/architecture.md draws: one rank on a gloo group in this process (no process started)."""
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import milktea
from milktea import trace


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_buckets_hops_as_the_picture_draws_them(group, monkeypatch, capsys):
    monkeypatch.setattr(trace, "ENABLED", True)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(300, 100), torch.nn.Linear(100, 10)), bucket_cap_mb=100)
    state = milktea.ddp.compress(model, milktea.TopK(0.01), error_feedback=True)
    try:
        for _ in range(2):             # the first step is dense (start_step 1): DDP rebuilds its buckets
            model(torch.randn(4, 300)).square().mean().backward()
    finally:
        state.close()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("milktea: rank 0 step 1:")]
    assert len(lines) == 1, lines
    hops = lines[0].split("step 1: ", 1)[1].split(" -> ")
    assert hops[:2] == ["hook", "communication thread"]
    assert hops[2].startswith("allreduce: 3 dense tensors")          # the biases and the 10x100 weight
    assert hops[3].startswith("allgather: 0.weight 30000 topk-1% Ledger.step, fused add and clear, torch, index")
    assert hops[4:] == ["all-gather of 1 ranks' packets", "decode_mean: onto the zeroed gradient", "future set"]
