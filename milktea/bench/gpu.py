"""One CUDA GPU, every GPU path once, within about five minutes.

    python -m milktea.bench gpu [--skip-notebooks]

1. kernels: every compressor as a multiple of a copy, on CUDA (python -m milktea.bench
   kernels --device cuda, beside torch.topk and the copy itself);
2. the simulator on CUDA: 64 workers, dense beside Top-1%+EF, and the batched path
   checked against one call per worker (bit for bit) for Top-K, Sign and int8;
3. the DDP hook on one GPU over NCCL (world size 1): three Top-1%+EF steps;
4. milktea.fsdp on two GPUs over NCCL (skipped with one: NCCL takes one rank per GPU, and
   one rank sends nothing): FSDP2 with int8 gradients and weights beside FSDP2's own
   collectives (compressor=None, the same parameters bit for bit);
5. chapters 01 and 03 run top to bottom with MILKTEA_DEVICE=cuda (nbclient).

Prints one line per check and a table; exits 1 if any check failed. Without CUDA it
prints a SKIP line and exits 0: nothing in milktea needs a GPU.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from .timing import table

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("01_bottleneck.ipynb", "03_topk.ipynb")


def _kernels() -> str:
    cmd = [sys.executable, "-m", "milktea.bench", "kernels", "--device", "cuda", "--sizes", "1000000",
           "25000000", "--repeat", "5", "--out", os.path.join("results", "bench_kernels_cuda.json")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=150,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    if r.returncode != 0:
        raise RuntimeError(f"kernels benchmark exited {r.returncode}: {r.stderr[-1500:]}")
    print(r.stdout)
    return "see the table above"


def _simulator() -> str:
    from ..compressors import Quantize, Sign, TopK
    from ..simulate import simulate
    from ..tasks import Digits
    task = Digits(hidden=32)
    run = dict(workers=64, steps=60, progress=False, device="cuda", eval_every=60)
    simulate(task, TopK(0.01), **dict(run, steps=2))               # CUDA start-up, not timed
    dense = simulate(task, None, **run)
    topk = simulate(task, TopK(0.01), **run)
    for comp in (TopK(0.01), Sign(), Quantize(8)):
        a = simulate(task, comp, batched=True, **dict(run, steps=10))
        b = simulate(task, comp, batched=False, **dict(run, steps=10))
        if a.loss != b.loss or a.bytes_sent != b.bytes_sent:
            raise AssertionError(f"{comp!r}: the batched path differs from one call per worker on CUDA")
    return (f"64 workers x 60 steps: dense {dense.wall_time:.2f} s, Top-1%+EF {topk.wall_time:.2f} s "
            f"({topk.wall_time / dense.wall_time:.1f}x), accuracy {topk.final('accuracy'):.1%}; batched == per worker")


def ddp_step(steps: int = 3) -> dict:
    """Inside a launched NCCL process: a small model under DDP with milktea's Top-1%+EF hook."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ..compressors import TopK
    from ..ddp import compress
    from ..device import rank_device
    dev = rank_device(dist.get_backend())      # this rank's GPU under NCCL, by the library's one rule
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    model = DDP(net, device_ids=[dev.index])
    state = compress(model, TopK(0.01), error_feedback=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps + 1):
        x, y = torch.randn(64, 64, device=dev), torch.randint(0, 10, (64,), device=dev)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    state.close()
    return dict(backend=dist.get_backend(), world=dist.get_world_size(), steps=len(state.stats),
                ratio=state.stats.last.ratio, losses=losses)


def _ddp() -> str:
    from ..distributed import launch
    res = launch(ddp_step, 1, backend="nccl", timeout=120)
    if res["backend"] != "nccl" or res["steps"] < 3:
        raise AssertionError(f"expected NCCL and >= 3 hooked steps, got {res}")
    return f"{res['backend']}, world {res['world']}, {res['steps']} steps, ratio {res['ratio']:.0f}x"


def fsdp_step(steps: int = 3) -> dict:
    """Inside a launched NCCL process: a small fully_shard model, FSDP2's own collectives
    (compressor=None) against a second copy that milktea's own (int8) might change."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from ..compressors import Quantize
    from ..device import rank_device
    from ..fsdp import compress
    dev = rank_device(dist.get_backend())      # the GPU under NCCL (the CPU under gloo, to test this)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)             # fully_shard's mesh takes the current device
    out = {}
    for name, comp, weights in (("own", None, None), ("none", None, None), ("int8", Quantize(bits=8, chunk=256),
                                                                           Quantize(bits=8, chunk=256))):
        torch.manual_seed(0)
        blocks = [torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()) for _ in range(2)]
        model = torch.nn.Sequential(*blocks, torch.nn.Linear(256, 10)).to(dev)
        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        state = None if name == "own" else compress(model, comp, weights=weights)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator(device=dev).manual_seed(1)
        for _ in range(steps):
            x = torch.randn(64, 256, device=dev, generator=gen)
            y = torch.randint(0, 10, (64,), device=dev, generator=gen)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out[name] = torch.cat([p.detach().full_tensor().reshape(-1).float().cpu() for p in model.parameters()])
        if state is not None:
            out[name + "_steps"] = len(state.stats)
            state.close()
    return dict(backend=dist.get_backend(), same=bool(torch.equal(out["own"], out["none"])),
                int8_diff=float((out["int8"] - out["own"]).abs().max()), steps=out["int8_steps"])


def _fsdp() -> str:
    from ..distributed import launch
    if torch.cuda.device_count() < 2:
        return "skipped: needs 2 GPUs (one NCCL rank per GPU; one rank alone sends nothing)"
    res = launch(fsdp_step, 2, backend="nccl", timeout=180)
    if res["backend"] != "nccl" or not res["same"] or res["steps"] < 3 or not res["int8_diff"] < 1:
        raise AssertionError(f"expected NCCL, compressor=None equal to FSDP2 bit for bit and >= 3 steps, got {res}")
    return (f"{res['backend']}: compressor=None == FSDP2 bit for bit; int8 gradients + weights, "
            f"{res['steps']} steps, max |diff| to FSDP2 {res['int8_diff']:.1e}")


def _notebook(name: str) -> str:
    import nbformat
    from nbclient import NotebookClient
    path = ROOT / "notebooks" / name
    nb = nbformat.read(path, as_version=4)
    before = os.environ.get("MILKTEA_DEVICE")
    os.environ["MILKTEA_DEVICE"] = "cuda"          # the kernel inherits it
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        if before is None:
            os.environ.pop("MILKTEA_DEVICE", None)
        else:
            os.environ["MILKTEA_DEVICE"] = before
    return f"{sum(c.cell_type == 'code' for c in nb.cells)} code cells ran"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench gpu", description=__doc__.split("\n")[0])
    ap.add_argument("--skip-notebooks", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("SKIP: python -m milktea.bench gpu needs a CUDA GPU (torch.cuda.is_available() is False); "
              "nothing in milktea depends on one")
        return 0
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}\n")
    checks = [("kernels on CUDA", _kernels), ("simulator on CUDA", _simulator), ("DDP hook over NCCL", _ddp),
              ("FSDP2 compression over NCCL", _fsdp)]
    if not args.skip_notebooks:
        checks += [(f"notebook {n}", lambda n=n: _notebook(n)) for n in NOTEBOOKS]
    rows, failed = [], 0
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    for name, fn in checks:
        t0 = time.perf_counter()
        try:
            detail, status = fn(), "ok"
        except Exception as e:  # noqa: BLE001 - every check runs; the table says which failed
            detail, status = f"{type(e).__name__}: {str(e)[:300]}", "FAIL"
            failed += 1
        rows.append(dict(check=name, status=status, seconds=f"{time.perf_counter() - t0:.1f}", detail=detail))
        print(f"{status:4}  {name}: {detail}", flush=True)
    print()
    print(table(rows, ["check", "status", "seconds", "detail"]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
