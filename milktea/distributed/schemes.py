"""Named communication schemes for training and comparison: milktea hooks and PyTorch's.

    handle = build("topk", ddp_model, ratio=0.01, link=EmulatedLink.gbit(1))
    ... train ...
    handle.stats.last, handle.close()

Every scheme goes through the same emulated link (milktea's via its communication layer,
PyTorch's hooks via `torch_hooks_through`), so step times compare fairly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass


from milktea.compressors import Sign, TopK
from milktea.compressors.codec import library
from milktea.distributed import hooks
from milktea.distributed.link import EmulatedLink, torch_hooks_through
from milktea.distributed.stats import StatsLog
from milktea.i18n import N_
from milktea.ledger import use_ledger

# name: (label, compressor factory(ratio, rank), error feedback): every library codec's own
# schemes (its record's `schemes`), then the hook's policies over them
MILKTEA = {name: scheme for record in library() for name, scheme in record.schemes.items()}
MILKTEA.update({
    "auto": ("auto (approx Top-{pct}+EF where it pays)", lambda r, k: TopK(r, approximate=True), True),
    # biased schemes run as chapter 04 recommends: the momentum before the compressor
    # (the hook's momentum= option, distributed.momentum), the optimizer without momentum
    "topk-mc": ("approx Top-{pct}+EF, momentum corrected", lambda r, k: TopK(r, approximate=True), True),
    "sign-mc": ("Sign+EF, momentum corrected", lambda r, k: Sign(), True),
})
MOMENTUM_CORRECTED = ("topk-mc", "sign-mc")
# the labels as tables show them (milktea.tables.word looks them up with their numbers as {})
_LABELS = (N_("approx Top-{}%+EF, momentum corrected"), N_("Sign+EF, momentum corrected"),
           N_("PowerSGD r{} batched+EF"), N_("Sign+EF"), N_("int4 stochastic"))
TORCH = {
    "torch-fp16": "PyTorch fp16_compress_hook",
    "torch-bf16": "PyTorch bf16_compress_hook",
    "torch-powersgd": "PyTorch powerSGD_hook r{rank}",
    "torch-batched-powersgd": "PyTorch batched_powerSGD_hook r{rank}",
}
BUILTIN = tuple(MILKTEA)
SCHEMES = tuple(MILKTEA) + tuple(TORCH)
COMPARE_DEFAULT = ("dense", "torch-fp16", "torch-bf16", "torch-powersgd", "torch-batched-powersgd",
                   "topk", "topk-approx", "int8", "sign", "topk-int8", "powersgd", "powersgd-batched", "auto")


class _Copies:
    """A picklable factory: a fresh deep copy of one compressor (a registered scheme)."""

    def __init__(self, compressor):
        self.compressor = compressor

    def __call__(self, ratio, rank):
        import copy
        return copy.deepcopy(self.compressor)


def register(name: str, compressor, *, error_feedback: bool | None = None, label: str | None = None) -> str:
    """Make `name` a scheme that `build`, `compare`, `TrainConfig` and the command lines
    accept, sending gradients with `compressor` (any milktea Compressor, including one
    defined in your own file: its `protocol` attribute says how it crosses the wire).
    error_feedback: None (default) gives the ledger to a compressor that declares itself
    `biased` (Top-K, Sign, ...) and not to an unbiased one (QSGD, TernGrad).

    >>> from milktea import TopK
    >>> register("topk-5pct", TopK(0.05), label="my Top-5%+EF")
    'topk-5pct'
    >>> label("topk-5pct")
    'my Top-5%+EF'
    >>> unregister("topk-5pct")
    """
    global SCHEMES
    if not isinstance(name, str) or not name or "," in name:
        raise TypeError(f"a scheme name is a non-empty str without commas, got {name!r}")
    if name in BUILTIN or name in TORCH:
        raise ValueError(f"{name!r} is a built-in scheme; choose another name")
    if not all(hasattr(compressor, m) for m in ("compress", "decompress", "fork")):
        raise TypeError(f"compressor must be a milktea compressor, got {type(compressor).__name__}")
    error_feedback = use_ledger(compressor, error_feedback)
    text = (label if label is not None else f"{name}{'+EF' if error_feedback else ''}")
    MILKTEA[name] = (text.replace("{", "{{").replace("}", "}}"), _Copies(compressor), bool(error_feedback))
    SCHEMES = tuple(MILKTEA) + tuple(TORCH)
    return name


def unregister(name: str) -> None:
    """Forget a scheme added with `register`."""
    global SCHEMES
    if name in BUILTIN or name not in MILKTEA:
        raise ValueError(f"{name!r} is not a registered scheme")
    del MILKTEA[name]
    SCHEMES = tuple(MILKTEA) + tuple(TORCH)


def registered(names=None) -> dict:
    """The schemes added with `register` (among `names`, if given): what a worker process
    needs to know them too (see `adopt`)."""
    return {n: MILKTEA[n] for n in MILKTEA if n not in BUILTIN and (names is None or n in names)}


def adopt(entries: dict) -> None:
    """In a worker process: know the schemes `registered()` returned in the parent."""
    global SCHEMES
    MILKTEA.update(entries)
    SCHEMES = tuple(MILKTEA) + tuple(TORCH)


def corrects_momentum(name: str) -> bool:
    """Whether scheme `name` keeps the momentum in its hook (the optimizer then has none).

    >>> corrects_momentum("topk-mc"), corrects_momentum("topk")
    (True, False)
    """
    return name in MOMENTUM_CORRECTED


def uses_ledger(name: str) -> bool:
    """Whether scheme `name` keeps an error-feedback ledger: milktea's schemes say so when
    registered; of PyTorch's hooks, the PowerSGD ones do (built with use_error_feedback=True),
    fp16 and bf16 do not.

    >>> uses_ledger("topk"), uses_ledger("int8"), uses_ledger("torch-powersgd"), uses_ledger("torch-fp16")
    (True, False, True, False)
    """
    if name in MILKTEA:
        return bool(MILKTEA[name][2])
    return name in ("torch-powersgd", "torch-batched-powersgd")


def label(name: str, ratio: float = 0.01, rank: int = 4) -> str:
    text = MILKTEA[name][0] if name in MILKTEA else TORCH[name]
    return text.format(pct=f"{100 * ratio:g}%", rank=rank)


@dataclass
class Handle:
    """A registered scheme: its statistics, and close() to stop it."""
    name: str
    label: str
    stats: StatsLog
    state: object

    def close(self) -> None:
        self.state.close()


class _TorchHookState:
    """Wraps one of PyTorch's hooks: routes its all-reduces through the link (see
    torch_hooks_through, from its start until close()), counts them, closes a step at the
    last bucket."""

    def __init__(self, hook, inner, log: StatsLog, link):
        self.hook, self.inner, self.log, self.link, self.step = hook, inner, log, link, 0
        # PyTorch's hook modules see the stand-in until close(); PowerSGD's second
        # all-reduce is issued from a callback, after this object's __call__ has returned
        self._route = torch_hooks_through(link, log, lambda: self.step)
        self.proxy = self._route.__enter__()

    def __call__(self, bucket):
        # this model's buckets are all handed over before another model's step starts,
        # and their callbacks finish before backward() returns: one active route at a time
        self.proxy.active = (self.link, self.log, lambda: self.step)
        t0 = time.perf_counter()
        fut = self.hook(self.inner, bucket)
        # what the hook does before it returns (casting, PowerSGD's first product) counts as
        # compression; the work in its callbacks is not visible from here
        self.log.add(self.step, dense_bytes=bucket.buffer().numel() * bucket.buffer().element_size(),
                     buckets=1, compress_s=time.perf_counter() - t0)
        if bucket.is_last():
            self.step += 1

            def close(f):
                self.log.close_step()
                return f.value()
            fut = fut.then(close)
        return fut

    def close(self) -> None:
        if self._route is not None:
            if self.proxy.active is not None and self.proxy.active[1] is self.log:
                self.proxy.active = None
            self._route.__exit__(None, None, None)
            self._route = None


def _call(state, bucket):  # no annotations: DDP checks them
    return state(bucket)


def _torch_hook(name, model, rank, start_step, link, log):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if name == "torch-fp16":
        hook, inner = default_hooks.fp16_compress_hook, None
    elif name == "torch-bf16":
        hook, inner = default_hooks.bf16_compress_hook, None
    else:
        # start_powerSGD_iter >= 2: PyTorch's own rule (buckets are rebuilt after step 1)
        inner = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=max(2, start_step),
                                            use_error_feedback=True, warm_start=True)
        hook = (powerSGD_hook.powerSGD_hook if name == "torch-powersgd"
                else powerSGD_hook.batched_powerSGD_hook)
    state = _TorchHookState(hook, inner, log, link)
    model.register_comm_hook(state, _call)
    return state


def build(name: str, model, *, ratio: float = 0.01, rank: int = 4, link: EmulatedLink | None = None,
          model_link=None, start_step: int = 1, min_size: int = 1024, keep_stats: int | None = None,
          momentum: float = 0.9) -> Handle:
    """Register scheme `name` (see SCHEMES) on DDP `model`. `momentum`: the velocity's factor
    of a momentum-corrected scheme (see `corrects_momentum`; its optimizer takes none)."""
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; choose from {', '.join(SCHEMES)}")
    log = StatsLog(keep=keep_stats)
    if name in TORCH:
        state = _torch_hook(name, model, rank, start_step, link, log)
    else:
        _, factory, ef = MILKTEA[name]
        options = dict(error_feedback=ef, start_step=start_step, min_size=min_size, link=link,
                       keep_stats=keep_stats)
        if name == "auto":
            options.update(policy="auto", model_link=model_link)
        if corrects_momentum(name):
            options.update(momentum=momentum)
        state = hooks.compress(model, factory(ratio, rank), **options)
        log = state.stats
    return Handle(name, label(name, ratio, rank), log, state)
