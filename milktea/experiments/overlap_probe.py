"""Measure the overlap of backward and communication in a real DDP run with milktea's hook.

Run on every rank by `milktea.distributed.launch` (this module is importable by the workers):

    from milktea.distributed import launch
    from milktea.experiments.overlap_probe import probe
    out = launch(probe, 2, kwargs=dict(link_gbit=1.0))
    out["runs"]["4 MB buckets"][-1]     # the last step: forward, per bucket (ready, done), end
    out["calibrated"]                   # the link as the cost model fits it: (bytes/s, latency s)

For each setting the probe builds a fresh deep MLP in DDP, registers milktea's hook (dense
all-reduce through an emulated link, or a compressor), and wraps it to time-stamp each
bucket: when DDP hands it over (its gradients are ready: the backward pass has reached it)
and when its exchange completes. "compute only" runs without the emulated link, to give
the cost model the backward time of each bucket.
"""
from __future__ import annotations

import time

import torch
from torch import nn

# (label, link or None, bucket MB, emulated backward: seconds of sleep per layer, or 0 for real compute)
DEFAULT_SETTINGS = (("compute only", None, 4.0, 0.0), ("one bucket", "link", 1000.0, 0.0),
                    ("4 MB buckets", "link", 4.0, 0.0))
EMULATED_SETTINGS = (("compute only, emulated", None, 4.0, 0.04), ("one bucket, emulated", "link", 1000.0, 0.04),
                     ("4 MB buckets, emulated", "link", 4.0, 0.04))


class _SleepInBackward(torch.autograd.Function):
    """Identity forward; its backward sleeps: compute emulated without using a core."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


class SleepyBackward(nn.Module):
    """A layer whose backward takes `seconds` of wall time and no CPU: a stand-in for a GPU
    kernel, which leaves the host's cores to the communication thread."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = float(seconds)

    def forward(self, x):
        return _SleepInBackward.apply(x, self.seconds)


def deep_mlp(width: int = 1024, depth: int = 4, features: int = 64, classes: int = 10, seed: int = 0,
             sleep_s: float = 0.0) -> nn.Module:
    """features -> width -> ... -> classes with ReLUs: `depth` linear layers, seeded. With
    `sleep_s`, each linear layer's backward also sleeps that long (emulated compute)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dims = [features] + [width] * (depth - 1) + [classes]
        layers = []
        for i in range(depth):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if sleep_s:
                layers.append(SleepyBackward(sleep_s))
            if i < depth - 1:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)


class _Stamps:
    """Wraps milktea's CompressionState: records (bucket index, bytes, ready, done) per bucket."""

    def __init__(self, state):
        self.state, self.rows = state, []

    def __call__(self, bucket):
        ready = time.perf_counter()
        row = [bucket.index(), bucket.buffer().numel() * bucket.buffer().element_size(), ready, None]
        self.rows.append(row)
        fut = self.state.hook(bucket)

        def done(f):
            row[3] = time.perf_counter()
            return f.value()
        return fut.then(done)


def _call(stamps, bucket):  # no annotations: DDP inspects them
    return stamps(bucket)


def _one_setting(model_kw, batch, steps, bucket_mb, link, compressor, seed, device, sleep_s=0.0):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed.hooks import CompressionState
    import torch.distributed as dist
    net = deep_mlp(**model_kw, seed=seed, sleep_s=sleep_s).to(device)
    model = DDP(net, bucket_cap_mb=bucket_mb, device_ids=[device.index] if device.type == "cuda" else None)
    state = CompressionState(model, compressor, link=link, error_feedback=compressor is not None)
    stamps = _Stamps(state)
    model.register_comm_hook(stamps, _call)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed * 100 + dist.get_rank())
    x = torch.randn(batch, model_kw.get("features", 64), generator=g).to(device)
    y = torch.randint(model_kw.get("classes", 10), (batch,), generator=g).to(device)
    out = []
    try:
        for _ in range(steps):
            dist.barrier()
            stamps.rows = []
            t0 = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t1 = time.perf_counter()
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=False)
            out.append({"forward": (t0, t1), "end": t2,
                        "buckets": [(r[2], r[3]) for r in sorted(stamps.rows, key=lambda r: r[2])],
                        "bytes": [r[1] for r in sorted(stamps.rows, key=lambda r: r[2])]})
    finally:
        state.close()
    return out


def probe(width: int = 1024, depth: int = 4, batch: int = 256, steps: int = 4, link_gbit: float = 1.0,
          latency_us: float = 50.0, settings=DEFAULT_SETTINGS, compressor=None, seed: int = 0,
          emulated_batch: int = 8) -> dict:
    """Every rank: calibrate the cost model on the emulated link (dense all-reduces of a few
    sizes, `calibrated` = (bandwidth B/s, latency s)), then run each (label, link or None,
    bucket MB, sleep per layer) setting for `steps` steps and return the per-step time stamps
    (rank 0's are what launch hands back). A setting with a sleep emulates the backward pass:
    each layer's backward sleeps that long, on a batch of `emulated_batch` (so the real
    arithmetic is small) and the cores stay free for the communication thread."""
    import torch.distributed as dist
    from milktea.distributed.calibrate import calibrate_link
    from milktea.distributed.link import EmulatedLink
    from milktea.distributed.train import device_for_rank
    device = device_for_rank()
    fitted = calibrate_link(repeats=3,   # the sizes the emulated link carries quickly (calibrate.sizes_for)
                            emulated=EmulatedLink.gbit(link_gbit, latency_us * 1e-6), device=device)
    runs = {}
    for label, use_link, bucket_mb, *sleep in settings:
        sleep_s = sleep[0] if sleep else 0.0
        link = EmulatedLink.gbit(link_gbit, latency_us * 1e-6) if use_link else None
        runs[label] = _one_setting(dict(width=width, depth=depth), emulated_batch if sleep_s else batch, steps,
                                   bucket_mb, link, compressor, seed, device, sleep_s)
    return {"runs": runs, "workers": dist.get_world_size(), "link_gbit": link_gbit,
            "calibrated": (fitted.bandwidth, fitted.latency),
            "latency_us": latency_us, "params": sum(p.numel() for p in deep_mlp(width, depth).parameters()),
            "device": str(device), "batch": batch}
