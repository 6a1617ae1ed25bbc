"""python -m milktea.bench memory: extra peak memory per rank of each scheme, over plain DDP.

Every scheme runs in fresh worker processes (2 ranks by default, a digits MLP of about
`--hidden` x 64 weights), so no peak is left over from another. In each rank, after the
model is built and the scheme's kernels are compiled on a small tensor, the peak is reset
(Linux: `/proc/self/clear_refs`; CUDA: torch's peak allocation counter), then DDP and
the hook are set up and a few steps run. The peak over that baseline, minus the same
for plain DDP with no hook, is what the scheme costs; it is printed as a multiple of
the model's size (4 bytes per parameter), the slowest rank's figure, beside PyTorch's
own hooks and the targets.
"""
from __future__ import annotations

import argparse
import json
import os

SCHEMES = ("dense", "torch-fp16", "torch-powersgd", "topk", "sign", "int8", "powersgd")
TARGETS = {"topk": 1.3, "sign": 1.3, "int8": 0.6, "powersgd": 1.2}   # x model size, at most


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


def run(schemes_=SCHEMES, hidden: int = 337_000, steps: int = 4, workers: int = 2) -> list[dict]:
    from milktea.distributed import WorkerError, launch
    from milktea.distributed.schemes import label

    def measure(scheme):
        ranks = launch(measure_rank, workers, args=(scheme, hidden, steps), results="all", timeout=900)
        return max(ranks, key=lambda r: r["extra_bytes"])   # the rank that needs the most

    plain = measure(None)
    rows = [{"scheme": "plain DDP", "label": "plain DDP (no hook)", "extra_bytes": plain["extra_bytes"],
             "over_ddp_x": 0.0, "model_bytes": plain["model_bytes"]}]
    for name in schemes_:
        try:
            r = measure(name)
        except WorkerError as e:   # one scheme failing does not hide the others' figures
            rows.append({"scheme": name, "label": label(name), "error": str(e).splitlines()[0]})
            continue
        over = (r["extra_bytes"] - plain["extra_bytes"]) / r["model_bytes"]
        rows.append({"scheme": name, "label": label(name), "extra_bytes": r["extra_bytes"],
                     "over_ddp_x": over, "model_bytes": r["model_bytes"], "target_x": TARGETS.get(name)})
    return rows


def table(rows: list[dict], workers: int) -> str:
    model_mb = rows[0]["model_bytes"] / 1e6
    lines = [f"extra peak memory per rank over plain DDP, {workers} ranks, model {model_mb:.1f} MB "
             f"(float32); the rank that needs the most",
             f"{'scheme':<26}{'peak over start MB':>19}{'over DDP':>10}{'target':>9}  ",
             "-" * 70]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['label']:<26}  not measured: {r['error'][:80]}")
            continue
        t = r.get("target_x")
        verdict = "" if t is None else ("ok" if r["over_ddp_x"] <= t else "MISSED")
        lines.append(f"{r['label']:<26}{r['extra_bytes'] / 1e6:>19.1f}{r['over_ddp_x']:>9.2f}x"
                     f"{'' if t is None else f'<= {t:g}x':>9}  {verdict}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench memory", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--hidden", type=int, default=337_000,
                    help="MLP width (337000: ~25M parameters; a small model measures mostly fixed overheads)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="results/bench_memory.json")
    a = ap.parse_args(argv)
    rows = run(tuple(s for s in a.schemes.split(",") if s), a.hidden, a.steps, a.workers)
    print(table(rows, a.workers))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0
