"""PyTorch's PowerSGD hooks as users meet them (chapter 06b), run on every rank of a launched
group: `start_powerSGD_iter` (dense all-reduces until that step: PyTorch's default is 1000),
`min_compression_rate` (a tensor that would shrink less is sent dense), the batched hook (one
matrix per bucket), and the state a checkpoint must keep (the ledgers and warm-start Q's).

    from milktea.distributed import launch
    out = launch(commhook.hook_demo, 2, kwargs=dict(..., parts=("torch-powersgd",)))
    out["PyTorch powerSGD_hook: bytes per step"]   # dense for the first steps, then small

milktea's own PowerSGD hook differs where the course wants it to: it compresses from its
`start_step` (1 by default, after DDP's first step has built the buckets) and keeps its
ledger in a `state_dict()`.
"""
from __future__ import annotations

import logging
import pickle

import torch

START_ITER = 3            # a short run's start_powerSGD_iter (PyTorch's default: 1000)


def defaults() -> dict:
    """PowerSGDState's defaults in the installed PyTorch, as a user who writes
    `PowerSGDState(process_group=None)` gets them."""
    import inspect
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    sig = inspect.signature(ps.PowerSGDState.__init__)
    keep = ("matrix_approximation_rank", "start_powerSGD_iter", "min_compression_rate", "use_error_feedback",
            "warm_start", "orthogonalization_epsilon")
    return {k: sig.parameters[k].default for k in keep if k in sig.parameters}


def small_mlp(seed: int = 0) -> torch.nn.Module:
    """64 -> 256 -> 256 -> 10: under 1 MB of gradients, so DDP keeps it in one bucket.

    PyTorch's PowerSGD hook issues its second all-reduce from a callback of the first; with
    several buckets on gloo we saw the two ranks issue their all-reduces in different orders
    and gloo abort, so the demo stays in one bucket (on GPUs, use NCCL as PyTorch advises)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def batched_hook_works() -> bool:
    """Whether the installed PyTorch's batched_powerSGD_hook gets past its first compressed
    step: in 2.13 it hands a 2-D Q to an orthogonalisation that wants a batch (3-D) and fails.

    >>> isinstance(batched_hook_works(), bool)
    True
    """
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    try:
        ps._orthogonalize(torch.randn(8, 2))
    except AssertionError:
        return False
    return True


def torch_powersgd(make_model, grads_after, x, y, steps: int = 5, rank: int = 2, start_iter: int = START_ITER) -> dict:
    """Runs on every rank: `steps` steps of a DDP model (`make_model()`, gradients by
    `grads_after(ddp, x, y)`) with PyTorch's powerSGD_hook and then its batched hook (where
    the installed PyTorch's works, see `batched_hook_works`), both with
    `start_powerSGD_iter=start_iter` and the default `min_compression_rate`; the bytes each
    step handed to all-reduce, and the floats a pickled PowerSGDState carries."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed.link import emulate_torch_collectives
    from milktea.distributed.stats import StatsLog
    logging.getLogger(ps.__name__).setLevel(logging.ERROR)     # its notes on pickling, per rank
    out = {"batched hook works": batched_hook_works()}
    hooks = [("powerSGD_hook", ps.powerSGD_hook)]
    if out["batched hook works"]:
        hooks.append(("batched_powerSGD_hook", ps.batched_powerSGD_hook))
    for name, hook in hooks:
        ddp = DDP(make_model())
        state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=start_iter,
                                 use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, hook)
        log, step = StatsLog(), [0]
        with emulate_torch_collectives(None, log, step=lambda step=step: step[0]):
            for _t in range(steps):
                grads_after(ddp, x, y)
                log.close_step()
                step[0] += 1
        out[f"PyTorch {name}: bytes per step"] = [s.payload_bytes for s in log.history]
        if name == "powerSGD_hook":
            saved = pickle.loads(pickle.dumps(state))
            floats = sum(t.numel() for d in (saved.error_dict, saved.q_memory_dict) for t in d.values())
            out["PyTorch PowerSGD: floats in the pickled state"] = floats
            out["PyTorch PowerSGD: parameters"] = sum(p.numel() for p in ddp.parameters())
    out["start_powerSGD_iter"] = start_iter
    return out


def knobs_demo(steps: int = 5, start_iter: int = START_ITER) -> dict:
    """Runs on every rank of a launched group (`milktea.distributed.launch(knobs_demo, 2)`):
    PyTorch's PowerSGD hooks on `small_mlp`, each rank on a batch of its own (`torch_powersgd`)."""
    import torch.distributed as dist
    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(64, 64, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    out = {"workers": dist.get_world_size(), "backend": dist.get_backend()}
    out.update(torch_powersgd(small_mlp, _grads_after, x, y, steps=steps, start_iter=start_iter))
    return out


def _grads_after(ddp, x, y) -> torch.Tensor:
    """One backward pass of `ddp` on (x, y); its gradients, flat."""
    ddp.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])


def knobs_sentence(out: dict) -> str:
    """What the run above shows, in words: dense steps before `start_powerSGD_iter`, the
    compressed bytes after it, the batched hook's, and what a checkpoint must carry."""
    from ..i18n import _
    from . import verdicts
    per = out["PyTorch powerSGD_hook: bytes per step"]
    start = out["start_powerSGD_iter"]
    dense, after = per[0], per[-1]
    # steps counted from 1, as a reader counts them: the first one that handed over fewer bytes
    first = next((i + 1 for i, b in enumerate(per) if b < dense), None)
    if first is None:
        text = _("With start_powerSGD_iter={start}, PyTorch's PowerSGD hook handed {dense:,} bytes to all-reduce in "
                 "every one of the {n} steps: it never compressed in this run.").format(start=start, dense=dense,
                                                                                         n=len(per))
    else:
        text = _("With start_powerSGD_iter={start}, PyTorch's PowerSGD hook handed {dense:,} bytes to all-reduce in "
                 "each of its first {dense_steps} steps (a plain fp32 all-reduce) and {after:,} from step {first} on: "
                 "{r:.0f}x less.").format(start=start, dense=dense, dense_steps=first - 1, after=after, first=first,
                                          r=dense / after if after else float("nan"))
    if "PyTorch batched_powerSGD_hook: bytes per step" in out:
        text += " " + _("The batched hook, one matrix per bucket, handed {b:,} bytes per compressed step.").format(
            b=out["PyTorch batched_powerSGD_hook: bytes per step"][-1])
    else:
        text += " " + _("The batched hook was not run: in the installed PyTorch it fails at its first compressed step "
                        "(its Q is a matrix where the orthogonalisation wants a batch of them).")
    text += " " + _("A pickled PowerSGDState carries {f:,} floats for {p:,} parameters (the ledgers and the warm-start "
                    "Q's): a checkpoint that leaves it out restarts error feedback from zero.").format(
        f=out["PyTorch PowerSGD: floats in the pickled state"], p=out["PyTorch PowerSGD: parameters"])
    return verdicts.tidy(text)
