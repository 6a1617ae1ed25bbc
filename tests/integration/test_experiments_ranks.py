"""Chapter 06's bare hook API on two real gloo workers, beside PyTorch's fp16 hook."""

import pytest
import torch

from milktea.experiments import commhook


def _fp16_hook(state, bucket):
    half = bucket.buffer().to(torch.float16).div_(state.world_size)
    return state.allreduce(half).then(lambda f: f.value()[0].to(torch.float32))


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_hook_demo_on_two_gloo_workers(ranks):
    import inspect
    source = inspect.getsource(_fp16_hook).replace("_fp16_hook", "hook")
    out = ranks(2).run(commhook.hook_demo, kwargs=dict(hook_source=source, hook_name="hook"), timeout=240)
    assert out["your hook vs PyTorch's fp16 hook (max |diff|)"] == 0.0
    assert 0 < out["your hook vs dense (relative error)"] < 1e-2
    assert out["your hook sent"] == ["torch.float16"] and out["your hook bytes"] * 2 == out["dense bytes"]
    assert out["buckets at bucket_cap_mb=0.5"] > out["buckets at bucket_cap_mb=25"] == 1
    assert out["all-reduce calls, 4 micro-batches without no_sync()"] == 4
    assert out["all-reduce calls, 4 micro-batches with no_sync()"] == 1
    assert out["accumulated gradients agree (max |diff|)"] < 1e-6
    assert out["milktea PowerSGD: floats in the saved state"] >= out["milktea PowerSGD: parameters"] * 0.9
