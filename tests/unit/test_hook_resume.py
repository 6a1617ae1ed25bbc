"""Every state the DDP hook keeps resumes bit for bit: a run stopped after 3 steps, its model,
optimizer and hook state loaded into a fresh DDP model and hook (whose buckets start in DDP's
first layout again, then are rebuilt, as in a new process), gives the uninterrupted run's
weights exactly. One rank on a gloo group in this process (no process is started); the
cross-process version is tests/integration/test_hook_restore.py."""
import copy
import io

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from milktea import QSGD, Cast, Chain, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
from milktea.distributed import hooks
from milktea.distributed.compressed_allreduce import use_compressed_allreduce


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# every protocol, with and without a ledger, with and without the compressors' own state
# (random streams, RandomK's step, PowerSGD's warm start), momentum correction, and runs
# that compress from DDP's first layout on (start_step 0; static_graph rebuilds after step 2)
SPECS = {
    "topk": (TopK(0.1), True, {}), "topk-noef": (TopK(0.1), False, {}),
    "topk-approx": (TopK(0.1, approximate=True), True, {}),
    "randomk": (RandomK(0.1), True, {}), "randomk-noef": (RandomK(0.1), False, {}),
    "int4-stochastic": (Quantize(4, stochastic=True), False, {}), "int8-ef": (Quantize(8), True, {}),
    "qsgd": (QSGD(4), False, {}), "terngrad": (TernGrad(), False, {}), "sign": (Sign(), True, {}),
    "topk-int8-stochastic": (Chain(TopK(0.1), Quantize(8, stochastic=True)), True, {}),
    "powersgd": (PowerSGD(2), True, {}), "powersgd-r3": (PowerSGD(3), True, {}), "powersgd-r1": (PowerSGD(1), True, {}), "powersgd-noef": (PowerSGD(2), False, {}),
    "powersgd-cold-noef": (PowerSGD(2, warm_start=False), False, {}),
    "powersgd-batched": (PowerSGD(2, batched=True), True, {}),
    "powersgd-batched-noef": (PowerSGD(2, batched=True), False, {}),
    "powersgd-batched-from-step-0": (PowerSGD(2, batched=True), True, {"start_step": 0}),
    "topk-from-step-0-static": (TopK(0.1), True, {"start_step": 0, "static_graph": True}),
    "fp16": (Cast(torch.float16), True, {}), "bf16-noef": (Cast(torch.bfloat16), False, {}),
    "car-sign": (use_compressed_allreduce(Sign()), True, {}),
    "car-int8-noef": (use_compressed_allreduce(Quantize(8)), False, {}),
    "dense": (None, False, {}),
    "topk-momentum": (TopK(0.1), True, {"momentum": 0.9}), "sign-momentum": (Sign(), True, {"momentum": 0.9}),
    "powersgd-noef-momentum": (PowerSGD(2), False, {"momentum": 0.9}),
}


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48),
                               torch.nn.ReLU(), torch.nn.Linear(48, 10))


def _run(spec, steps, saved=None):
    comp, ef, options = spec
    net = _net()
    options = dict(options)
    model = DDP(net, bucket_cap_mb=0.004, static_graph=options.pop("static_graph", False))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.0 if "momentum" in options else 0.9)
    state = hooks.compress(model, copy.deepcopy(comp), error_feedback=ef, min_size=64, **options)
    try:
        if saved is not None:    # as load_checkpoint does, through the bytes of a file
            saved = torch.load(io.BytesIO(saved), weights_only=False)
            net.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            state.load_state_dict(saved["hook"])
        for step in steps:
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        compressed = state.stats.last.compressed
        f = io.BytesIO()
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "hook": state.state_dict()}, f)
    finally:
        state.close()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]), f.getvalue(), compressed


@pytest.mark.parametrize("label", list(SPECS))
def test_a_resumed_hook_gives_the_uninterrupted_weights(group, label):
    spec = SPECS[label]
    whole, _, _ = _run(spec, range(6))
    _, saved, _ = _run(spec, range(3))
    resumed, _, compressed = _run(spec, range(3, 6), saved)
    assert compressed or spec[0] is None
    assert torch.equal(whole, resumed), (whole - resumed).abs().max().item()
