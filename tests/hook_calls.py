"""What tests/integration/test_hook_calls.py runs in each rank: the Python calls of one DDP
step, every thread counted (the profile set for this thread and for every thread started
after, milktea's communication thread included)."""
import collections
import sys
import threading

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Calls:
    """A profile function that counts the Python functions entered while `on`."""

    def __init__(self):
        self.on = False
        self.counts = collections.Counter()

    def __call__(self, frame, event, arg):
        if self.on and event == "call":
            self.counts[f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"] += 1


def _model():
    """Two weights of a million entries (Top-K's sampled threshold, the compiled loops) and
    two biases under min_size (sent dense): one bucket."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 1000))


def one_step_calls(scheme: str, steps: int = 4) -> dict:
    """Calls in the last of `steps` DDP steps (forward, backward, optimizer step) with
    `scheme`: "fp16" (PyTorch's fp16_compress_hook) or "topk" (milktea, Top-1% + error
    feedback); the earlier steps let DDP rebuild its buckets and every cache fill."""
    import milktea
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    calls = Calls()
    threading.setprofile(calls)
    sys.setprofile(calls)
    try:
        model = DDP(_model(), bucket_cap_mb=100)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        state = None
        if scheme == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        else:
            state = milktea.ddp.compress(model, milktea.TopK(0.01), error_feedback=True)
        x = torch.randn(32, 1024, generator=torch.Generator().manual_seed(dist.get_rank()))
        for step in range(steps):
            calls.counts.clear()
            calls.on = step == steps - 1
            model(x).square().mean().backward()     # returns once DDP's hooks delivered every bucket
            opt.step()
            opt.zero_grad()
            calls.on = False
        if state is not None:
            state.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return {"total": sum(calls.counts.values()), "top": calls.counts.most_common(12)}


def both() -> dict:
    return {scheme: one_step_calls(scheme) for scheme in ("fp16", "topk")}
