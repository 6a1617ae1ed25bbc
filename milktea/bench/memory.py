"""python -m milktea.bench memory: extra peak memory per rank of each scheme, over plain DDP.

Each scheme runs in fresh worker processes (2 ranks by default) the script a user would
write: an MLP 64 -> `--hidden` -> 10 (337000: 25.3M parameters, 101 MB of float32), SGD
with momentum 0.9, a random batch of 32, `DDP(net)` with its default options, the
scheme's hook (`milktea.distributed.schemes.build`), and its first `--steps` (3) steps.
In each rank, after the model and the optimizer are built and the scheme's compiled
kernels loaded, the peak is reset (Linux: `/proc/self/clear_refs`; CUDA: torch's peak
allocation counter), then DDP, the hook and the steps run. The peak over that baseline,
minus the same for plain DDP with no hook, is what the scheme costs; it is printed as a
multiple of the model's size, the slowest rank's figure, beside PyTorch's own hooks and
the targets.

milktea's compiled kernels (numba, loaded at a compressor's first large tensor) cost a
fixed amount per process whatever the model: the row "milktea's kernels" is the peak
that loading them adds in a rank that has done nothing else since the baseline (on
Linux about 130 MB, two thirds of it shared-library pages that the ranks of one machine
share), shown against the model's size like the rest. A user's script pays it once, on
top of the scheme's figure.

Two allocator settings, side by side. "glibc default" is what an unconfigured process
shows, and the targets are checked there. glibc's malloc raises its mmap threshold each
time a large block is freed (up to 32 MB), after which blocks of that size come from
heaps it keeps: a hook that allocated and freed large temporaries every step would show
them here. "release" starts every rank with MALLOC_MMAP_THRESHOLD_=131072, which pins
the threshold so that freed blocks go back to the system: what remains is what the
scheme holds (its ledger, its buffers).
"""
from __future__ import annotations

import argparse
import json
import os

from ..tables import text_table

SCHEMES = ("dense", "torch-fp16", "torch-powersgd", "topk", "sign", "int8", "powersgd", "powersgd-batched")
# x model size, at most (batched PowerSGD's ledger is the bucket padded to a square: the same size)
TARGETS = {"topk": 1.3, "sign": 1.3, "int8": 0.6, "powersgd": 1.2, "powersgd-batched": 1.2}
ALLOCATORS = {"glibc default": {}, "release": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
CHECKED = "glibc default"       # the column the targets are checked on
KERNELS = "kernels"             # the row of milktea's compiled kernels (fixed, per process)


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
    (None: plain DDP, no hook) trains `steps` steps of a user's script (see the module's
    docstring); KERNELS: what loading milktea's compiled kernels adds, and no steps."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from milktea.distributed import schemes
    from milktea.distributed.compare import _warm_up
    from milktea.distributed.train import TrainConfig, device_for_rank
    device = device_for_rank()
    torch.manual_seed(dist.get_rank())
    net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).to(device)
    x, y = torch.randn(batch, 64, device=device), torch.randint(0, 10, (batch,), device=device)
    params = sum(p.numel() for p in net.parameters())
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    hooked = scheme not in (None, KERNELS)
    if hooked:
        _warm_up([scheme], TrainConfig())   # the kernels' fixed cost has a row of its own
    dist.barrier()
    base = _reset_peak(device)
    if scheme == KERNELS:     # what loading them adds, before anything else: no step's noise
        _warm_up(list(schemes.MILKTEA), TrainConfig())
        return {"extra_bytes": _peak(device) - base, "model_bytes": 4 * params, "params": params,
                "device": str(device)}
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)   # DDP's defaults
    handle = schemes.build(scheme, model) if hooked else None
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    extra = _peak(device) - base
    if handle is not None:
        handle.close()
    return {"extra_bytes": extra, "model_bytes": 4 * params, "params": params, "device": str(device)}


def run(schemes_=SCHEMES, hidden: int = 337_000, steps: int = 3, workers: int = 2,
        allocators=tuple(ALLOCATORS), kernels: bool = True, repeat: int = 3) -> list[dict]:
    """One row per scheme: extra peak bytes over plain DDP under each allocator setting
    (`over_ddp_x[setting]`, a multiple of the model's size); with `kernels`, first a row
    for milktea's compiled kernels (a fixed cost per process, see the module's docstring).
    Each figure is the median of `repeat` launches (of the rank that needs the most in
    each): when a collective or a freed block lands in a step's peak varies from run to
    run, by as much as the model's size, for plain DDP too."""
    import statistics
    from milktea.distributed import WorkerError, launch
    from milktea.distributed.schemes import label

    def measure(scheme, setting):
        runs = []
        for _ in range(repeat):
            ranks = launch(measure_rank, workers, args=(scheme, hidden, steps), results="all", timeout=900,
                           env=ALLOCATORS[setting])
            runs.append(max(ranks, key=lambda r: r["extra_bytes"]))   # the rank that needs the most
        return {**runs[0], "extra_bytes": statistics.median(r["extra_bytes"] for r in runs),
                "runs": [r["extra_bytes"] for r in runs]}

    plain = {a: measure(None, a) for a in allocators}
    model_bytes = plain[allocators[0]]["model_bytes"]
    rows = [{"scheme": "plain DDP", "label": "plain DDP (no hook)", "model_bytes": model_bytes, "steps": steps, "repeat": repeat,
             "extra_bytes": {a: plain[a]["extra_bytes"] for a in allocators}, "runs": {a: plain[a]["runs"] for a in allocators},
             "over_ddp_x": {a: 0.0 for a in allocators}}]
    names = ((KERNELS,) if kernels else ()) + tuple(schemes_)
    for name in names:
        shown = "milktea's kernels (once per process)" if name == KERNELS else label(name)
        row = {"scheme": name, "label": shown, "model_bytes": model_bytes, "target_x": TARGETS.get(name),
               "extra_bytes": {}, "over_ddp_x": {}}
        try:
            for a in allocators:
                r = measure(name, a)
                row["extra_bytes"][a] = r["extra_bytes"]
                row.setdefault("runs", {})[a] = r["runs"]
                over = 0 if name == KERNELS else plain[a]["extra_bytes"]    # the kernels: on their own
                row["over_ddp_x"][a] = (r["extra_bytes"] - over) / r["model_bytes"]
        except WorkerError as e:   # one scheme failing does not hide the others' figures
            row["error"] = str(e).splitlines()[0]
        rows.append(row)
    return rows


def table(rows: list[dict], workers: int) -> str:
    """`run`'s rows as text: each allocator setting's figure, the target and whether it holds."""
    model_mb = rows[0]["model_bytes"] / 1e6
    allocators = list(rows[0]["over_ddp_x"])
    check = CHECKED if CHECKED in allocators else allocators[0]
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
            f"the rank that needs the most (median of {rows[0].get('repeat', 1)} launches), first {rows[0].get('steps', 3)} steps; targets checked on \"{check}\"\n"
            + text_table(shown, ["scheme", *allocators, "target", "verdict"], formats, right=[*allocators, "target"],
                         note="error"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench memory", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--hidden", type=int, default=337_000,
                    help="MLP width (337000: ~25M parameters; a small model measures mostly fixed overheads)")
    ap.add_argument("--steps", type=int, default=3, help="training steps measured (a user's first ones)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS),
                    help=f"comma-separated, from: {', '.join(ALLOCATORS)}")
    ap.add_argument("--repeat", type=int, default=3, help="launches per figure, of which the median is shown")
    ap.add_argument("--no-kernels", action="store_true", help="skip the row of milktea's compiled kernels")
    ap.add_argument("--out", default="results/bench_memory.json")
    a = ap.parse_args(argv)
    allocators = tuple(x for x in a.allocators.split(",") if x)
    unknown = [x for x in allocators if x not in ALLOCATORS]
    if unknown or not allocators:
        ap.error(f"--allocators: choose from {', '.join(ALLOCATORS)}, got {a.allocators!r}")
    rows = run(tuple(s for s in a.schemes.split(",") if s), a.hidden, a.steps, a.workers, allocators,
               kernels=not a.no_kernels, repeat=max(1, a.repeat))
    print(table(rows, a.workers))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0
