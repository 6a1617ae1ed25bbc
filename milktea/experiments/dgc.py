"""DGC's four techniques, one switched off at a time (chapter 04), where they can show what
they do: the tiny GPT at 1% density, several seeds, every sparse variant sending the same
bytes, and DGC's own warm-up (the kept share steps down once per epoch, with a learning
rate ramped up over the same epochs).

    runs = ablation(seeds=(0, 1, 2))         # {variant: [History per seed]}
    ablation_rows(runs)                      # mean and spread of the validation loss, bytes ratio
    verdict(runs)                            # what each technique did, and whether it is significant

Equal bytes: the warm-up keeps more entries early on, so the variants without it (and the
plain ledger) keep, at every step, the warm-up run's average share instead: each sparse run
sends the same number of values over the run, and only *when* they are sent differs.
"""
from __future__ import annotations

import math

from ..feedback import DGC, warmup_ratio
from ..i18n import N_, _
from ..simulate import simulate
from . import verdicts

# name -> (DGC switches, optimizer momentum); None as switches means dense SGD
VARIANTS = {
    N_("dense SGD, momentum 0.9"): (None, True),
    N_("Top-K + ledger, optimizer momentum"): (dict(momentum_correction=False, clip=False, warmup=False), True),
    N_("DGC, all four techniques"): (dict(), False),
    N_("DGC without momentum correction"): (dict(momentum_correction=False), True),
    N_("DGC without factor masking"): (dict(masking=False), False),
    N_("DGC without gradient clipping"): (dict(clip=False), False),
    N_("DGC without warm-up"): (dict(warmup=False), False),
}
COLUMNS = (N_("val loss (mean)"), N_("spread (±)"), N_("per seed"))   # ablation_rows' columns, for the catalog
FULL, DENSE, PLAIN = "DGC, all four techniques", "dense SGD, momentum 0.9", "Top-K + ledger, optimizer momentum"


def gpt_task():
    """The GPT the ablation trains: chapter 03's tiny GPT made smaller (one block, 32 wide,
    16 characters of context); `model_parts` says how many parameters and where."""
    from ..tasks import CharGPT
    return CharGPT(n_layer=1, n_head=2, n_embd=32, block=16, max_val_windows=128)


PARTS = (N_("embeddings"), N_("output layer"), N_("attention"), N_("MLP"), N_("norms"))


def model_parts(task=None) -> dict:
    """The GPT's size and where its parameters sit, counted on the model itself: blocks, width,
    context, parameters, and the share of each part (token and position embeddings, the
    output layer, attention, MLP, LayerNorms).

    >>> parts = model_parts()
    >>> parts["blocks"], parts["params"], round(parts["share"]["MLP"], 2)
    (1, 19552, 0.43)
    """
    task = task if task is not None else gpt_task()
    model, cfg = task.model(), task.cfg
    count = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():
        part = ("embeddings" if name.startswith(("wte", "wpe")) else "output layer" if name.startswith("lm_head")
                else "attention" if ".attn." in name else "MLP" if ".mlp." in name else "norms")
        count[part] += p.numel()
    total = sum(count.values())
    return {"blocks": cfg.n_layer, "width": cfg.n_embd, "context": cfg.block, "params": total,
            "count": count, "share": {k: v / total for k, v in count.items()}}


def schedule(ratio: float, steps: int, epoch_steps: int, epochs: int = 4, start: float = 0.25):
    """DGC's warm-up on this run: the kept share of each step (`epochs` stages of
    `epoch_steps`), and the constant share that sends as many values over `steps`."""
    shares = [warmup_ratio(t // epoch_steps, ratio, epochs, start) for t in range(steps)]
    return shares, sum(shares) / steps


def lr_warmup(lr: float, steps: int):
    """A learning rate rising linearly to `lr` over `steps` steps, then constant."""
    return lambda t: lr * min(1.0, (t + 1) / steps)


def ablation(task=None, ratio: float = 0.01, *, workers: int = 4, steps: int = 80, batch: int = 8,
             lr: float = 0.3, momentum: float = 0.9, clip: float = 0.5, epoch_steps: int = 5, epochs: int = 4,
             seeds=(0, 1, 2), eval_every: int | None = None, variants=None, device="cpu") -> dict:
    """Train every variant once per seed, all from the same weights and batches for a given
    seed; return {variant: [History, one per seed]}.

    Where momentum correction is off, the momentum moves to the optimizer (as with plain
    Top-K under torch.optim.SGD); where it is on, the optimizer has none (DGC keeps it).
    `clip`: the per-worker gradient-norm limit (DGC: the global threshold times N^-1/2).
    The warm-up: `epochs` stages of `epoch_steps` steps, and the learning rate ramped up over
    the same steps in every run (dense included). The variants without the sparsity warm-up
    keep the warm-up's average share at every step: equal bytes (see the module's docstring).
    """
    task = gpt_task() if task is None else task
    warm_steps = epochs * epoch_steps
    if not 0 < warm_steps < steps:
        raise ValueError(f"the warm-up ({epochs} x {epoch_steps} steps) must be shorter than the run ({steps} steps)")
    _shares, flat_share = schedule(ratio, steps, epoch_steps, epochs)
    rate = lr_warmup(lr, warm_steps)
    out = {}
    for name in (variants or VARIANTS):
        if name not in VARIANTS:
            raise ValueError(f"unknown variant {name!r}; choose from {list(VARIANTS)}")
        switches, optimizer_momentum = VARIANTS[name]
        out[name] = []
        for seed in seeds:
            if switches is None:
                compressor = None
            else:
                warm = switches.get("warmup", True)
                compressor = DGC(ratio=ratio if warm else flat_share, momentum=momentum, approximate=False,
                                 seed=seed, momentum_correction=switches.get("momentum_correction", True),
                                 masking=switches.get("masking", True),
                                 clip=None if switches.get("clip", True) is False else clip,
                                 warmup_steps=epochs if warm else 0, stage_steps=epoch_steps)
            h = simulate(task, compressor, workers=workers, steps=steps, batch=batch, lr=rate,
                         momentum=momentum if optimizer_momentum else 0.0, seed=seed,
                         eval_every=eval_every or steps, device=device, progress=False)
            h.scheme = name
            out[name].append(h)
    return out


def _losses(hs) -> list[float]:
    return [h.final("loss") if h.diverged_at is None else math.nan for h in hs]


def ablation_rows(runs: dict) -> list[dict]:
    """One row per variant: the validation loss's mean over the seeds and its spread (half the
    range), each seed's loss, and the bytes ratio (averaged over the seeds)."""
    rows = []
    for name, hs in runs.items():
        losses = _losses(hs)
        ok = [x for x in losses if not math.isnan(x)]
        mean = sum(ok) / len(ok) if ok else math.nan
        rows.append({"scheme": _(name), "val loss (mean)": mean,
                     "spread (±)": (max(ok) - min(ok)) / 2 if ok else math.nan,
                     "per seed": ", ".join("—" if math.isnan(x) else f"{x:.3f}" for x in losses),
                     "R (real packets)": sum(h.ratio for h in hs) / len(hs),
                     "diverged": sum(h.diverged_at is not None for h in hs)})
    return rows


def effects(runs: dict) -> dict:
    """Per technique: the paired difference of validation loss (with it minus without it,
    seed by seed; negative = it helped) and the half-width of its 95% interval."""
    full = _losses(runs[FULL])
    out = {}
    for name, hs in runs.items():
        if name.startswith("DGC without"):
            out[name[len("DGC without "):]] = verdicts.paired(full, _losses(hs))
    if PLAIN in runs:
        out["all four (against the plain ledger)"] = verdicts.paired(full, _losses(runs[PLAIN]))
    return out


def verdict(runs: dict) -> str:
    """What each technique did to the validation loss, with its 95% interval over the seeds:
    "helped" or "hurt" only where the interval excludes zero, else "no measurable effect"."""
    seeds = len(runs[FULL])
    full = sum(_losses(runs[FULL])) / seeds
    text = _("Validation loss after the run, mean of {n} seeds: full DGC {full:.3f}").format(n=seeds, full=full)
    if DENSE in runs:
        dense = sum(_losses(runs[DENSE])) / seeds
        _mean, half = verdicts.paired(_losses(runs[FULL]), _losses(runs[DENSE]))
        text += _(", dense SGD {dense:.3f}: full DGC is {gap}.").format(
            dense=dense, gap=verdicts.gap(full, dense, _("dense SGD"), 0.0 if not math.isfinite(half) else half,
                                          higher_is_better=False, unit="", scale=1, digits=3))
    else:
        text += "."
    names = {"momentum correction": _("momentum correction"), "factor masking": _("factor masking"),
             "gradient clipping": _("gradient clipping"), "warm-up": _("warm-up"),
             "all four (against the plain ledger)": _("all four (against the plain ledger)")}
    parts = []
    for what, (mean, half) in effects(runs).items():
        if math.isnan(mean):
            said = verdicts.failed()
        else:
            said = verdicts.effect(0.0, -mean, 0.0 if math.isinf(half) else half, higher_is_better=False, unit="",
                                   scale=1, digits=3, show_noise=True)
        parts.append(_("{what}: {said}").format(what=names.get(what, what), said=said))
    text += " " + _("What each technique did to the validation loss (with it minus without it, seed by seed; an "
                    "effect is named only where its {c:.0%} interval excludes zero): {parts}.").format(
        c=0.95, parts=_("; ").join(parts))
    text += " " + _("With {n} seeds only large effects can be told from noise: \"no measurable effect\" means this "
                    "run cannot tell, not that the technique does nothing.").format(n=seeds)
    return verdicts.tidy(text)
