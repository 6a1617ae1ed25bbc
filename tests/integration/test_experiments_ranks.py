"""Chapter 06's bare hook API on two real gloo workers, beside PyTorch's fp16 hook."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from milktea.experiments import commhook


def _fp16_hook(state, bucket):
    half = bucket.buffer().to(torch.float16).div_(state.world_size)
    return state.allreduce(half).then(lambda f: f.value()[0].to(torch.float32))


def _step(model, micro_batches):
    ddp_model = DistributedDataParallel(model)
    state = commhook.Group()
    ddp_model.register_comm_hook(state, hook)   # noqa: F821 (compiled on the workers beside the hook)
    *first, (x, y) = micro_batches
    with ddp_model.no_sync():
        for xb, yb in first:
            F.cross_entropy(ddp_model(xb), yb).backward()
    F.cross_entropy(ddp_model(x), y).backward()
    return ddp_model, state


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_hook_demo_on_two_gloo_workers(ranks):
    import inspect
    from milktea.experiments.powersgd_knobs import knobs_sentence
    source = inspect.getsource(_fp16_hook).replace("_fp16_hook", "hook")
    out = ranks(2).run(commhook.hook_demo, kwargs=dict(hook_source=source, hook_name="hook",
                                                       step_source=inspect.getsource(_step), step_name="_step"),
                       timeout=240)
    assert out["your hook vs PyTorch's fp16 hook (max |diff|)"] == 0.0
    assert 0 < out["your hook vs dense (relative error)"] < 1e-2
    assert out["your hook sent"] == ["torch.float16"] and out["your hook bytes"] * 2 == out["dense bytes"]
    assert out["micro-batches in your step"] == 4 and out["buckets"] == 1      # no_sync(): one exchange
    assert out["buckets at bucket_cap_mb=0.5"] > out["buckets at bucket_cap_mb=25"] == 1
    assert out["all-reduce calls, 4 micro-batches without no_sync()"] == 4
    assert out["all-reduce calls, 4 micro-batches with no_sync()"] == 1
    assert out["accumulated gradients agree (max |diff|)"] < 1e-6
    assert out["milktea PowerSGD: floats in the saved state"] >= out["milktea PowerSGD: parameters"] * 0.9
    per = out["PyTorch powerSGD_hook: bytes per step"]               # dense before start_powerSGD_iter
    start = out["start_powerSGD_iter"]
    assert per[:start] == [per[0]] * start and per[0] == 4 * out["PyTorch PowerSGD: parameters"]
    assert all(b < per[0] / 10 for b in per[start:])
    assert out["PyTorch PowerSGD: floats in the pickled state"] >= out["PyTorch PowerSGD: parameters"]
    assert "start_powerSGD_iter=3" in knobs_sentence(out) and "from step 4 on" in knobs_sentence(out)
