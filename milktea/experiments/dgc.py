"""DGC's four techniques, one switched off at a time, on the digits task (chapter 04).

    >>> rows = ablation(steps=20, workers=2, eval_every=20)   # doctest: +SKIP
"""
from __future__ import annotations

from ..feedback import DGC
from ..i18n import N_
from ..simulate import simulate
from ..tasks import Digits

# name -> (DGC switches, optimizer momentum); None as switches means dense SGD
VARIANTS = {
    "dense SGD, momentum 0.9": (None, True),
    "Top-K + ledger, optimizer momentum": (dict(momentum_correction=False, clip=False, warmup=False), True),
    "DGC, all four techniques": (dict(), False),
    "DGC without momentum correction": (dict(momentum_correction=False), True),
    "DGC without factor masking": (dict(masking=False), False),
    "DGC without gradient clipping": (dict(clip=False), False),
    "DGC without warm-up": (dict(warmup=False), False),
}
# the names as tables and legends show them (through the catalog)
VARIANT_NAMES = (N_("dense SGD, momentum 0.9"), N_("Top-K + ledger, optimizer momentum"), N_("DGC, all four techniques"),
                 N_("DGC without momentum correction"), N_("DGC without factor masking"),
                 N_("DGC without gradient clipping"), N_("DGC without warm-up"))


def ablation(task=None, ratio: float = 0.001, workers: int = 8, steps: int = 200, lr: float = 0.1,
             momentum: float = 0.9, clip: float = 1.0, warmup_steps: int = 40, seed: int = 0,
             eval_every: int = 20, variants=None, device=None) -> dict:
    """Train every variant from the same weights and data; return {name: History}.

    Where momentum correction is off, the momentum moves to the optimizer (as with plain
    Top-K under torch.optim.SGD); where it is on, the optimizer has none (DGC keeps it).
    `clip` is the per-worker gradient-norm limit; `warmup_steps` the warm-up length.
    """
    task = Digits(hidden=32) if task is None else task
    out = {}
    for name in (variants or VARIANTS):
        if name not in VARIANTS:
            raise ValueError(f"unknown variant {name!r}; choose from {list(VARIANTS)}")
        switches, optimizer_momentum = VARIANTS[name]
        if switches is None:
            compressor = None
        else:
            s = dict(switches)
            compressor = DGC(ratio=ratio, momentum=momentum, approximate=False, seed=seed,
                             momentum_correction=s.get("momentum_correction", True),
                             masking=s.get("masking", True),
                             clip=None if s.get("clip", True) is False else clip,
                             warmup_steps=0 if s.get("warmup", True) is False else warmup_steps)
        out[name] = simulate(task, compressor, workers=workers, steps=steps, lr=lr,
                             momentum=momentum if optimizer_momentum else 0.0, seed=seed,
                             eval_every=eval_every, device=device, progress=False)
    return out


def ablation_rows(runs: dict) -> list[dict]:
    """One table row per variant: accuracy, loss, bytes ratio, divergence."""
    rows = []
    for name, h in runs.items():
        rows.append({"scheme": name, "held-out accuracy": h.final("accuracy"), "held-out loss": h.final("loss"),
                     "R (real packets)": h.ratio, "diverged": h.diverged_at is not None})
    return rows


def verdict(runs: dict) -> str:
    """One sentence on what switching each technique off did, from the numbers of this run."""
    full = runs["DGC, all four techniques"].final("accuracy")
    dense = runs["dense SGD, momentum 0.9"].final("accuracy")
    parts = []
    for name, h in runs.items():
        if name.startswith("DGC without"):
            d = 100 * (h.final("accuracy") - full)
            parts.append(f"{name[len('DGC without '):]} off: {d:+.1f} points")
    plain = runs.get("Top-K + ledger, optimizer momentum")
    head = (f"Full DGC ends at {full:.1%} against {dense:.1%} for dense SGD"
            + (f" and {plain.final('accuracy'):.1%} for the plain ledger with optimizer momentum" if plain else "")
            + ". Switching one technique off: " + "; ".join(parts) + ".")
    return head
