"""The training script that `python -m milktea.bench memory` measures, as a user writes it.

    torchrun --standalone --nproc_per_node 2 -m milktea.bench.memory_script topk --hidden 337000

An MLP 64 -> hidden -> 10, `DDP(net)` with its default options, the scheme's hook
(`milktea.distributed.schemes.build`; "plain": none), SGD with momentum 0.9, a random
batch of 32 and `--steps` steps (3); then each rank prints one line,
``MEMORY {"rank": r, "peak_bytes": ..., "model_bytes": ...}`` (and, with `--record DIR`,
writes it to DIR/rank<r>.json): its peak resident set
since the process started (VmHWM; on GPU, torch's peak allocation), with whatever
allocator settings the environment has. "kernels:topk,sign" is plain DDP that loads the
compiled kernels of those schemes (on a small tensor) before its steps: the fixed cost
any script that uses them pays once.
"""
from __future__ import annotations

import argparse
import json
import os


def peak_bytes(device) -> int:
    """This process's peak: VmHWM (Linux), or torch's peak allocation on a GPU."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench.memory_script", description=__doc__.split("\n")[0])
    ap.add_argument("scheme", help="plain, kernels:NAME,NAME or a scheme of milktea.distributed.schemes")
    ap.add_argument("--hidden", type=int, default=337_000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--record", help="a folder: each rank also writes its record there, as rank<r>.json")
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from milktea.device import backend_for, rank_device
    device = rank_device()                 # MILKTEA_DEVICE, else each local rank's own GPU, else the CPU
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend_for(device))
    torch.manual_seed(dist.get_rank())
    net = nn.Sequential(nn.Linear(64, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 10)).to(device)
    model = DDP(net, device_ids=[device.index] if cuda else None)
    handle = None
    if a.scheme.startswith("kernels:"):
        from milktea.distributed.compare import _warm_up
        from milktea.distributed.train import TrainConfig
        _warm_up([s for s in a.scheme.split(":", 1)[1].split(",") if s], TrainConfig())
    elif a.scheme != "plain":
        from milktea.distributed import schemes
        handle = schemes.build(a.scheme, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(a.batch, 64, device=device), torch.randint(0, 10, (a.batch,), device=device)
    for _ in range(a.steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    params = sum(p.numel() for p in net.parameters())
    record = json.dumps({"rank": dist.get_rank(), "peak_bytes": peak_bytes(device), "model_bytes": 4 * params})
    print("MEMORY " + record, flush=True)
    if a.record:
        with open(os.path.join(a.record, f"rank{dist.get_rank()}.json"), "w") as f:
            f.write(record)
    if handle is not None:
        handle.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    import milktea.ddp
    milktea.ddp.end_script(code)   # a normal exit can abort in gloo's threads (see end_script)
