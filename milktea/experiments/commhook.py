"""PyTorch's DDP communication-hook API, bare (chapter 06): a hook is a function
`hook(state, bucket) -> Future` that DDP calls once per bucket of gradients, instead of
its own all-reduce. The future's value replaces the bucket's contents.

The hooks in this course are written against a tiny `state`: `state.world_size` and
`state.allreduce(tensor) -> Future` (whose value is `[summed tensor]`, as
`dist.all_reduce(t, async_op=True).get_future()` gives). `Group` is the real one (a
process group); `FakeGroup` and `FakeBucket` run a hook in one process, with no process
group at all, which is how a hook is unit-tested (and how the exercise grades one).

    >>> import torch
    >>> def halve(state, bucket):     # a do-nothing "hook": average the bucket in fp32
    ...     fut = state.allreduce(bucket.buffer() / state.world_size)
    ...     return fut.then(lambda f: f.value()[0])
    >>> run_fake(halve, [torch.ones(3), 3 * torch.ones(3)])["result"]
    tensor([2., 2., 2.])
"""
from __future__ import annotations

import torch

from ..i18n import N_
from ..tables import joined


class FakeBucket:
    """What DDP hands a hook: `.buffer()` (the flat gradients), `.index()`, `.is_last()`."""

    def __init__(self, buffer: torch.Tensor, index: int = 0, last: bool = True):
        if not isinstance(buffer, torch.Tensor) or buffer.dim() != 1:
            raise TypeError("a bucket's buffer is a flat (1-d) torch.Tensor")
        self._buffer, self._index, self._last = buffer, int(index), bool(last)

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last

    def __repr__(self) -> str:
        return f"FakeBucket({self._buffer.numel()} {self._buffer.dtype} entries, index={self._index})"


class FakeGroup:
    """A stand-in for N workers, each assumed to run the same hook on its own gradient:
    `allreduce(t)` adds to t every other worker's gradient divided by the world size and cast
    to t's dtype (what that worker would send), and returns a completed Future of [sum]. It
    records the dtype and bytes of every tensor the hook sends."""

    def __init__(self, others: list):
        self.others = [torch.as_tensor(o) for o in others]
        self.world_size = len(self.others) + 1
        self.sent: list[tuple[torch.dtype, int]] = []

    def allreduce(self, tensor: torch.Tensor) -> torch.futures.Future:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"allreduce takes a torch.Tensor, got {type(tensor).__name__}")
        self.sent.append((tensor.dtype, tensor.numel() * tensor.element_size()))
        total = tensor.clone()
        for o in self.others:
            total += (o.reshape(tensor.shape) / self.world_size).to(tensor.dtype)
        fut = torch.futures.Future()
        fut.set_result([total])
        return fut


class Group:
    """The real state: all-reduce on the default process group (inside a launched worker)."""

    def __init__(self):
        import torch.distributed as dist
        self.world_size = dist.get_world_size()
        self.sent: list[tuple[torch.dtype, int]] = []

    def allreduce(self, tensor):
        import torch.distributed as dist
        self.sent.append((tensor.dtype, tensor.numel() * tensor.element_size()))
        return dist.all_reduce(tensor, async_op=True).get_future()


def run_fake(hook, grads: list) -> dict:
    """Run `hook` as worker 0 of len(grads) workers (each a flat float32 gradient); return
    what DDP would put into the bucket and what crossed the (fake) wire."""
    mine = torch.as_tensor(grads[0]).clone()
    group = FakeGroup([torch.as_tensor(g) for g in grads[1:]])
    fut = hook(group, FakeBucket(mine))
    if not (hasattr(fut, "wait") and hasattr(fut, "then")):
        raise TypeError(f"a communication hook returns a torch.futures.Future, got {type(fut).__name__}")
    out = fut.wait()
    out = out[0] if isinstance(out, (list, tuple)) else out
    return {"result": out, "sent": group.sent, "bytes sent": sum(b for _dtype, b in group.sent)}


def _compile(source: str, name: str, space: dict | None = None):
    import sys
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    space = {"torch": torch, "dist": dist, "F": F, "DistributedDataParallel": DistributedDataParallel,
             "commhook": sys.modules[__name__]} if space is None else space
    exec(compile(source, f"<hook {name}>", "exec"), space)   # the reader's own cell, on their machine
    if not callable(space.get(name)):
        raise ValueError(f"the source defines no function named {name!r}")
    return space[name]


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 10))


def _grads_after(ddp, x, y) -> torch.Tensor:
    ddp.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])


PARTS = ("hook", "buckets", "accumulate", "powersgd", "torch-powersgd")
# hook_demo's keys as a reader sees them (tables.pairs shows them through the catalog)
KEYS = (N_("workers"), N_("backend"), N_("your hook vs PyTorch's fp16 hook (max |diff|)"),
        N_("your hook vs dense (relative error)"), N_("your hook sent"), N_("your hook bytes"), N_("dense bytes"),
        N_("buckets"), N_("buckets at bucket_cap_mb={}"), N_("all-reduce calls, {} micro-batches with no_sync()"),
        N_("all-reduce calls, {} micro-batches without no_sync()"), N_("accumulated gradients agree (max |diff|)"),
        N_("milktea PowerSGD: steps"), N_("milktea PowerSGD: parameters with a saved ledger"),
        N_("milktea PowerSGD: floats in the saved state"), N_("milktea PowerSGD: parameters"),
        N_("micro-batches in your step"), N_("PyTorch powerSGD_hook: bytes per step"),
        N_("PyTorch batched_powerSGD_hook: bytes per step"), N_("PyTorch PowerSGD: floats in the pickled state"),
        N_("PyTorch PowerSGD: parameters"), N_("start_powerSGD_iter"), N_("batched hook works"))


def hook_demo(hook_source: str, hook_name: str, accumulate: int = 4, parts=PARTS, step_source: str | None = None,
              step_name: str | None = None) -> dict:
    """Runs on every rank (inside `milktea.distributed.launch`): one step of a small MLP under
    DDP with the default all-reduce, with the reader's hook, and with PyTorch's
    fp16_compress_hook; then micro-batch accumulation with and without `no_sync()`, the
    bucket count for two `bucket_cap_mb`, milktea's PowerSGD hook and the state a checkpoint
    must keep, and PyTorch's PowerSGD hooks with their knobs (`powersgd_knobs`).

    `step_source`/`step_name`: the reader's own training step, `step(model, micro_batches) ->
    (ddp_model, state)`, which wraps the model in DDP, registers the hook and accumulates the
    micro-batches; the reader's hook is then run through it (the references accumulate the
    same micro-batches the same way)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(64, 64, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    out = {"workers": world, "backend": dist.get_backend()}

    if "hook" in parts:
        if step_source is not None:
            out.update(_your_step(hook_source, hook_name, step_source, step_name, x, y, accumulate))
        else:
            out.update(_your_hook(hook_source, hook_name, x, y))
    if "buckets" in parts:
        out.update(_buckets(x, y, world))
    if "accumulate" in parts:
        out.update(_accumulate(x, y, world, accumulate))
    if "powersgd" in parts:
        out.update(_powersgd(x, y))
    if "torch-powersgd" in parts:
        from .powersgd_knobs import small_mlp, torch_powersgd
        out.update(torch_powersgd(small_mlp, _grads_after, x, y))
    return out


def _your_hook(hook_source, hook_name, x, y):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    dense = _grads_after(DDP(_model()), x, y)
    mine = DDP(_model())
    group = Group()
    mine.register_comm_hook(group, _compile(hook_source, hook_name))
    yours = _grads_after(mine, x, y)
    theirs_ddp = DDP(_model())
    theirs_ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    theirs = _grads_after(theirs_ddp, x, y)
    out["your hook vs PyTorch's fp16 hook (max |diff|)"] = float((yours - theirs).abs().max())
    out["your hook vs dense (relative error)"] = float((yours - dense).norm() / dense.norm())
    out["your hook sent"] = sorted({str(d) for d, _size in group.sent})
    out["your hook bytes"] = sum(b for _dtype, b in group.sent)
    out["dense bytes"] = dense.numel() * 4
    out["buckets"] = len(group.sent)
    return out


def _accumulated(ddp, micro) -> torch.Tensor:
    """The reader's step done the reference way: every micro-batch but the last in no_sync()."""
    *first, (xl, yl) = micro
    with ddp.no_sync():
        for xb, yb in first:
            torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
    torch.nn.functional.cross_entropy(ddp(xl), yl).backward()
    return torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])


def _your_step(hook_source, hook_name, step_source, step_name, x, y, accumulate):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    hook = _compile(hook_source, hook_name)
    space = {**hook.__globals__, hook_name: hook}
    step = _compile(step_source, step_name, space)
    micro = [(x[i], y[i]) for i in torch.chunk(torch.arange(len(y)), accumulate)]
    ddp, state = step(_model(), micro)
    yours = torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])
    dense = _accumulated(DDP(_model()), micro)
    theirs_ddp = DDP(_model())
    theirs_ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    theirs = _accumulated(theirs_ddp, micro)
    sent = getattr(state, "sent", [])
    return {"your hook vs PyTorch's fp16 hook (max |diff|)": float((yours - theirs).abs().max()),
            "your hook vs dense (relative error)": float((yours - dense).norm() / dense.norm()),
            "your hook sent": sorted({str(d) for d, _size in sent}), "your hook bytes": sum(b for _dtype, b in sent),
            "dense bytes": dense.numel() * 4, "buckets": len(sent), "micro-batches in your step": len(micro)}


def _buckets(x, y, world):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    # bucket_cap_mb: how many hook calls (buckets) one backward makes
    for cap in (0.5, 25):
        calls = []

        def counting(state, bucket, calls=calls):
            calls.append(bucket.buffer().numel())
            return dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future().then(
                lambda f: f.value()[0])
        m = DDP(_model(), bucket_cap_mb=cap)
        m.register_comm_hook(None, counting)
        _grads_after(m, x, y)   # the first step uses DDP's initial buckets
        calls.clear()
        _grads_after(m, x, y)
        out[f"buckets at bucket_cap_mb={cap:g}"] = len(calls)
    return out


def _accumulate(x, y, world, accumulate):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    # accumulation: every backward outside no_sync() is all-reduced
    for use_no_sync in (False, True):
        calls = []

        def counting(state, bucket, calls=calls):
            calls.append(1)
            return dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future().then(
                lambda f: f.value()[0])
        m = DDP(_model(), bucket_cap_mb=25)
        m.register_comm_hook(None, counting)
        m.zero_grad(set_to_none=True)
        micro = torch.chunk(torch.arange(64), accumulate)
        for i, idx in enumerate(micro):
            last = i == len(micro) - 1
            ctx = m.no_sync() if use_no_sync and not last else _null()
            with ctx:
                (torch.nn.functional.cross_entropy(m(x[idx]), y[idx]) / accumulate).backward()
        key = "with no_sync()" if use_no_sync else "without no_sync()"
        out[f"all-reduce calls, {accumulate} micro-batches {key}"] = len(calls)
        out[f"grads {key}"] = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
    a, b = out.pop("grads without no_sync()"), out.pop("grads with no_sync()")
    out["accumulated gradients agree (max |diff|)"] = float((a - b).abs().max())
    return out


def _powersgd(x, y):
    """milktea's PowerSGD through milktea.ddp.compress: the ledger lives in the hook's state,
    and a checkpoint must save it (state_dict) or error feedback restarts from zero."""
    import milktea
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(_model())
    state = milktea.ddp.compress(m, milktea.PowerSGD(rank=2), error_feedback=True)
    try:
        for _step in range(3):
            _grads_after(m, x, y)
        saved = state.state_dict()
    finally:
        state.close()
    floats = sum(t.numel() for t in _tensors(saved["params"]) if t.is_floating_point())   # not RNG states
    return {"milktea PowerSGD: steps": saved["step"],
            "milktea PowerSGD: parameters with a saved ledger": len(saved["params"]["residuals"]),
            "milktea PowerSGD: floats in the saved state": floats,
            "milktea PowerSGD: parameters": sum(p.numel() for p in m.parameters())}


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def demo_sentence(out: dict) -> str:
    """`hook_demo`'s results in words: what the reader's hook sent and whether its gradients
    match PyTorch's fp16 hook bit for bit, the hook calls per bucket size, and the all-reduces
    with and without `no_sync()`."""
    from ..i18n import _
    from . import verdicts
    diff = out["your hook vs PyTorch's fp16 hook (max |diff|)"]
    text = ""
    if "micro-batches in your step" in out:
        text += _("Your step accumulated {m} micro-batches and DDP called your hook {b} time(s), all in the last "
                  "backward pass (the others ran inside no_sync()).").format(
            m=out["micro-batches in your step"], b=out["buckets"]) + " "
    if diff == 0:
        text += _("Your hook sent {dtypes}: {mine:,} bytes against {dense:,} dense, and its gradients are bit for bit "
                  "those of PyTorch's fp16 hook; both differ from the fp32 all-reduce by a relative {rel:.1e}, fp16's "
                  "rounding.").format(dtypes=joined(out["your hook sent"]), mine=out["your hook bytes"],
                                      dense=out["dense bytes"], rel=out["your hook vs dense (relative error)"])
    else:
        text += _("Your hook sent {dtypes}: {mine:,} bytes against {dense:,} dense, and its gradients differ from "
                  "PyTorch's fp16 hook's by up to {diff:.1e}; from the fp32 all-reduce, by a relative {rel:.1e}.").format(
            dtypes=joined(out["your hook sent"]), mine=out["your hook bytes"], dense=out["dense bytes"], diff=diff,
            rel=out["your hook vs dense (relative error)"])
    caps = sorted(k for k in out if k.startswith("buckets at bucket_cap_mb="))
    if caps:
        calls = [_("{n} hook call(s) at bucket_cap_mb = {cap} MB").format(n=out[caps[0]], cap=caps[0].split("=")[1])]
        calls += [_("{n} at {cap} MB").format(n=out[k], cap=k.split("=")[1]) for k in caps[1:]]
        text += " " + _("The same backward pass made {calls}.").format(calls=_(", ").join(calls))
    with_key = next((k for k in out if k.startswith("all-reduce calls") and k.endswith("with no_sync()")), None)
    without_key = next((k for k in out if k.startswith("all-reduce calls") and k.endswith("without no_sync()")), None)
    if with_key and without_key:
        text += " " + _("Accumulating micro-batches made {without} all-reduces without no_sync() and {with_} with it, "
                        "for the same gradients (largest difference {d:.1e}).").format(
            without=out[without_key], with_=out[with_key], d=out["accumulated gradients agree (max |diff|)"])
    return verdicts.tidy(text)


def code_of(fn) -> str:
    """`fn`'s source as a chapter prints it: dedented, without its docstring.

        >>> print(code_of(code_of).splitlines()[0])
        def code_of(fn) -> str:
        >>> '"' * 3 in code_of(code_of)
        False
    """
    import ast
    import inspect
    import textwrap
    src = textwrap.dedent(inspect.getsource(fn))
    lines, body = src.splitlines(), ast.parse(src).body[0].body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        del lines[first.lineno - 1:first.end_lineno]
    return "\n".join(lines)
