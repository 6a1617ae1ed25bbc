"""python -m milktea.bench memory: extra peak memory per rank of each scheme, over plain DDP.

Every scheme runs in fresh worker processes (2 ranks by default, a digits MLP of about
`--hidden` x 64 weights), so no peak is left over from another. In each rank, after the
model is built and the scheme's kernels are compiled on a small tensor, the peak is reset
(Linux: `/proc/self/clear_refs`; CUDA: torch's peak allocation counter), then DDP and
the hook are set up and a few steps run. The peak over that baseline, minus the same
for plain DDP with no hook, is what the scheme costs; it is printed as a multiple of
the model's size (4 bytes per parameter), the slowest rank's figure, beside PyTorch's
own hooks and the targets.

Two allocator settings, side by side. glibc's malloc raises its mmap threshold each time
a large block is freed (up to 32 MB), after which blocks of that size come from heaps it
keeps: freed temporaries then stay in the resident set, and a peak of RSS counts them.
"release" starts every rank with MALLOC_MMAP_THRESHOLD_=131072, which pins the threshold
so that freed blocks go back to the system: what remains is what the scheme really holds
(its ledger, packets, decode buffers). The targets are checked on that column; the
"glibc default" column is what an unconfigured process shows. A user who wants the
smaller figure sets the same variable (or runs with jemalloc/tcmalloc).
"""
from __future__ import annotations

import argparse
import json
import os

from ..tables import text_table

SCHEMES = ("dense", "torch-fp16", "torch-powersgd", "topk", "sign", "int8", "powersgd", "powersgd-batched")
# x model size, at most (batched PowerSGD's ledger is the bucket padded to a square: the same size)
TARGETS = {"topk": 1.3, "sign": 1.3, "int8": 0.6, "powersgd": 1.2, "powersgd-batched": 1.2}
ALLOCATORS = {"release": {"MALLOC_MMAP_THRESHOLD_": "131072"}, "glibc default": {}}


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak(device) -> int:
    """Reset the peak to what is in use now; return that."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")   # resets VmHWM (peak resident set) to the current VmRSS
    return _rss_bytes("VmRSS")


def _peak(device) -> int:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return _rss_bytes("VmHWM")


def measure_rank(scheme: str | None, hidden: int, steps: int, batch: int = 32) -> dict:
    """Inside a launched rank: bytes of peak memory over the baseline while `scheme`
    (None: plain DDP, no hook) trains `steps` steps."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from milktea.distributed import schemes
    from milktea.distributed.compare import _warm_up
    from milktea.distributed.train import TrainConfig, device_for_rank
    from milktea.tasks import Digits
    device = device_for_rank()
    task = Digits(hidden=hidden, seed=0)
    x, y = task.shard(dist.get_rank(), dist.get_world_size())
    x, y = x[:batch].to(device), y[:batch].to(device)
    net = task.model().to(device)
    params = sum(p.numel() for p in net.parameters())
    if scheme is not None:
        _warm_up([scheme], TrainConfig())   # JIT compilation is not the scheme's memory
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dist.barrier()
    base = _reset_peak(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None,
                gradient_as_bucket_view=True)
    handle = schemes.build(scheme, model) if scheme is not None else None
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        task.loss(model(x), y).mean().backward()
        opt.step()
    extra = _peak(device) - base
    if handle is not None:
        handle.close()
    return {"extra_bytes": extra, "model_bytes": 4 * params, "params": params, "device": str(device)}


def run(schemes_=SCHEMES, hidden: int = 337_000, steps: int = 4, workers: int = 2,
        allocators=tuple(ALLOCATORS)) -> list[dict]:
    """One row per scheme: extra peak bytes over plain DDP under each allocator setting
    (`over_ddp_x[setting]`, a multiple of the model's size)."""
    from milktea.distributed import WorkerError, launch
    from milktea.distributed.schemes import label

    def measure(scheme, setting):
        ranks = launch(measure_rank, workers, args=(scheme, hidden, steps), results="all", timeout=900,
                       env=ALLOCATORS[setting])
        return max(ranks, key=lambda r: r["extra_bytes"])   # the rank that needs the most

    plain = {a: measure(None, a) for a in allocators}
    model_bytes = plain[allocators[0]]["model_bytes"]
    rows = [{"scheme": "plain DDP", "label": "plain DDP (no hook)", "model_bytes": model_bytes,
             "extra_bytes": {a: plain[a]["extra_bytes"] for a in allocators}, "over_ddp_x": {a: 0.0 for a in allocators}}]
    for name in schemes_:
        row = {"scheme": name, "label": label(name), "model_bytes": model_bytes, "target_x": TARGETS.get(name),
               "extra_bytes": {}, "over_ddp_x": {}}
        try:
            for a in allocators:
                r = measure(name, a)
                row["extra_bytes"][a] = r["extra_bytes"]
                row["over_ddp_x"][a] = (r["extra_bytes"] - plain[a]["extra_bytes"]) / r["model_bytes"]
        except WorkerError as e:   # one scheme failing does not hide the others' figures
            row["error"] = str(e).splitlines()[0]
        rows.append(row)
    return rows


def table(rows: list[dict], workers: int) -> str:
    """`run`'s rows as text: each allocator setting's figure, the target and whether it holds."""
    model_mb = rows[0]["model_bytes"] / 1e6
    allocators = list(rows[0]["over_ddp_x"])
    check = "release" if "release" in allocators else allocators[0]
    shown = []
    for r in rows:
        t = r.get("target_x")
        row = {"scheme": r["label"], "target": t, **r["over_ddp_x"]}
        if "error" in r:
            row["error"] = f"not measured: {r['error'][:80]}"
        elif t is not None:
            row["verdict"] = "ok" if r["over_ddp_x"][check] <= t else "MISSED"
        shown.append(row)
    formats = {a: "{:.2f}x" for a in allocators} | {"target": "<= {:g}x"}
    return (f"extra peak memory per rank over plain DDP (x the model's {model_mb:.1f} MB of float32), {workers} ranks, "
            "the rank that needs the most; targets checked with freed memory released\n"
            + text_table(shown, ["scheme", *allocators, "target", "verdict"], formats, right=[*allocators, "target"],
                         note="error"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench memory", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--hidden", type=int, default=337_000,
                    help="MLP width (337000: ~25M parameters; a small model measures mostly fixed overheads)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS),
                    help=f"comma-separated, from: {', '.join(ALLOCATORS)}")
    ap.add_argument("--out", default="results/bench_memory.json")
    a = ap.parse_args(argv)
    allocators = tuple(x for x in a.allocators.split(",") if x)
    unknown = [x for x in allocators if x not in ALLOCATORS]
    if unknown or not allocators:
        ap.error(f"--allocators: choose from {', '.join(ALLOCATORS)}, got {a.allocators!r}")
    rows = run(tuple(s for s in a.schemes.split(",") if s), a.hidden, a.steps, a.workers, allocators)
    print(table(rows, a.workers))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0
