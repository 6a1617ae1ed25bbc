"""`python -m milktea.local`: DiLoCo on real processes, under torchrun, on local workers, or
as replica groups on torchft that survive a group's death (--ft, see milktea.local.ft.cli).

    torchrun --nproc-per-node 4 -m milktea.local --inner-steps 50 --steps 200 --bits 8
    python -m milktea.local --workers 4 --inner-steps 50 --steps 200 --bits 8 --link 1
    python -m milktea.local --ft --groups 3 --inner-steps 20 --steps 600 --bits 8 --kill 2:5:10
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m milktea.local", allow_abbrev=False,
                                 description="Train with local steps (DiLoCo) on real processes.")
    ap.add_argument("--task", default="gpt", help="gpt (the character GPT) or digits (default gpt)")
    ap.add_argument("--steps", type=int, default=200, help="inner steps per worker, a multiple of H (default 200)")
    ap.add_argument("--inner-steps", type=int, default=50, help="H: inner steps between exchanges (default 50)")
    ap.add_argument("--inner-lr", type=float, default=3e-3, help="the workers' AdamW learning rate (default 3e-3)")
    ap.add_argument("--outer-lr", type=float, default=0.7, help="head office's SGD learning rate (default 0.7)")
    ap.add_argument("--outer-momentum", type=float, default=0.9, help="its Nesterov momentum (default 0.9)")
    ap.add_argument("--bits", type=int, choices=(2, 4, 8), default=None, help="quantize the reports (default fp32)")
    ap.add_argument("--topk", type=float, default=None, metavar="RATIO",
                    help="send only this share of each report, with a ledger (with --bits: its values quantized)")
    ap.add_argument("--compressor", default=None, metavar="NAME",
                    help="a named scheme's compressor instead of --bits/--topk: " + ", ".join(COMPRESSORS))
    ap.add_argument("--fragments", type=int, default=1, help="P: parameter groups sent in turn (default 1)")
    ap.add_argument("--overlap", type=int, default=0, help="tau: inner steps while a fragment is on the wire")
    ap.add_argument("--batch", type=int, default=8, help="examples per worker per step (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--link", type=float, default=None, metavar="GBIT", help="emulate a link of this many Gbit/s")
    ap.add_argument("--checkpoint", default=None, metavar="DIR", help="save each rank's state here every outer step")
    ap.add_argument("--resume", action="store_true", help="start from the states in --checkpoint")
    ap.add_argument("--workers", type=int, default=None, help="local worker processes to start (not with torchrun)")
    ap.add_argument("--save", default=None, metavar="FILE",
                    help="save the result (head office's parameters 'theta', the losses, the bytes) with torch.save")
    ap.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                    help="stop, naming the rank, when one makes no progress for this long (default 300); "
                         "with --ft, the whole run's limit")
    from .ft.cli import add_arguments
    add_arguments(ap)
    return ap


# milktea.distributed.schemes' names whose compressor a report may use (--compressor)
COMPRESSORS = ("dense", "int8", "int4", "topk", "topk-int8", "sign", "randomk", "qsgd", "terngrad", "fp16", "bf16",
               "powersgd")


def named_compressor(name: str, ratio: float | None):
    """The compressor of milktea.distributed.schemes' `name` (ratio: Top-K's and Random-K's share)."""
    from milktea.distributed.schemes import MILKTEA
    if name not in COMPRESSORS:
        raise ValueError(f"--compressor {name!r}: choose one of {', '.join(COMPRESSORS)}")
    return MILKTEA[name][1](0.01 if ratio is None else ratio, 2)


def scheme_from(a: argparse.Namespace):
    from milktea.compressors import Chain, Quantize, TopK
    from milktea.local import AdamW, DiLoCo, OuterSGD
    compressor = None
    if getattr(a, "compressor", None) is not None:
        if a.bits is not None:
            raise ValueError("give --compressor or --bits, not both")
        compressor = named_compressor(a.compressor, a.topk)
    elif a.topk is not None:
        top = TopK(ratio=a.topk)
        compressor = top if a.bits is None else Chain(top, Quantize(bits=a.bits, chunk=None))
    elif a.bits is not None:
        compressor = Quantize(bits=a.bits, chunk=None)
    return DiLoCo(inner_steps=a.inner_steps, inner=AdamW(lr=a.inner_lr),
                  outer=OuterSGD(lr=a.outer_lr, momentum=a.outer_momentum), compressor=compressor,
                  fragments=a.fragments, overlap=a.overlap)


def _print(res: dict) -> None:
    sent = sum(res["bytes_sent"])
    dense = res["theta"].numel() * 4 * res["steps"]
    f = res["final"]
    print(f"{res['scheme']}: {res['workers']} workers, {res['steps']} inner steps ({res['outer_steps']} outer), "
          f"{sent / 1e6:.3f} MB sent per worker ({dense / max(sent, 1):.0f}x fewer than DDP), "
          f"held-out loss {f['loss']:.4f}")


def main(argv=None) -> None:
    from milktea.distributed.train import launch_timeouts
    from milktea.local.dist import RunConfig, train
    ap = build_parser()
    a = ap.parse_args(argv if argv is not None else sys.argv[1:])
    try:                               # every setting checked here, before a process starts
        scheme = scheme_from(a)
        if a.steps % a.inner_steps:
            raise ValueError(f"--steps {a.steps} is not a multiple of --inner-steps {a.inner_steps}: "
                             f"a run ends on an outer step")
    except (TypeError, ValueError) as e:
        ap.error(str(e))
    if not a.ft and (a.kill or a.group_id is not None or a.lighthouse):
        ap.error("--kill, --group-id and --lighthouse are for fault-tolerant runs: add --ft")
    if a.ft and a.save:
        ap.error("--ft saves its results in --out (result.json, and each group's parameters)")
    if a.ft:
        from milktea.local.ft.cli import main as ft_main
        return ft_main(a, ap, scheme, RunConfig(task=a.task, steps=a.steps, batch=a.batch, seed=a.seed))
    cfg = RunConfig(task=a.task, steps=a.steps, batch=a.batch, seed=a.seed, link_gbit=a.link,
                    checkpoint=a.checkpoint, resume=a.resume)
    timeouts = launch_timeouts(a.timeout)
    if "RANK" in os.environ and a.workers is None:     # under torchrun: join its process group
        from milktea.distributed.launch import pick_backend
        backend = pick_backend(int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeouts["collective_timeout"]))
        try:
            res = train(scheme, cfg)
        finally:
            dist.destroy_process_group()
        if int(os.environ["RANK"]) == 0:
            _print(res)
            if a.save:
                torch.save(res, a.save)
        return
    from milktea.distributed.launch import WorkerError, launch
    try:
        res = launch(train, a.workers or 2, args=(scheme, cfg), grace=10.0, **timeouts)
    except (WorkerError, TimeoutError) as e:
        print(e, file=sys.stderr)
        raise SystemExit(1) from None
    _print(res)
    if a.save:
        torch.save(res, a.save)


if __name__ == "__main__":
    main()
    if "RANK" in os.environ:          # under torchrun this process joined (and left) a process group
        from milktea.distributed.worker import end_process
        end_process(0)
