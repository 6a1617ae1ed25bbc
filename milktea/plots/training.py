"""Training curves of simulated runs (milktea.simulate's `History`), one line per run.

    >>> from milktea.simulate import simulate
    >>> from milktea.tasks import Quadratic
    >>> h = simulate(Quadratic(50), workers=2, steps=5, progress=False, eval_every=5)
    >>> curve(h).get_ylabel(), curve(h, metric="error").get_ylabel()   # no accuracy: the training loss
    ('training loss', 'error')
"""
from __future__ import annotations

from ..i18n import N_, _
from ..simulate import History
from ..tables import word

# the axis names of the metrics a run keeps, as a reader sees them
SHOWN = {"train loss": N_("training loss"), "loss": N_("loss"), "accuracy": N_("accuracy"), "error": N_("error")}
# held-out metrics by task: the digits' held-out split is a test set, the tiny GPT's a validation set
HELD_OUT = {("digits", "accuracy"): N_("test accuracy"), ("digits", "loss"): N_("test loss"),
            ("gpt", "loss"): N_("validation loss")}


def metric_name(metric: str, task: str | None = None) -> str:
    """The axis name of `metric` (a key of History.evals, or "train loss") as the reader sees
    it; with the run's `task` name, which held-out split it was measured on.

    >>> metric_name("loss", "gpt"), metric_name("accuracy", "digits"), metric_name("perplexity")
    ('validation loss', 'test accuracy', 'perplexity')
    """
    key = HELD_OUT.get((task, metric)) or SHOWN.get(metric)
    return _(key) if key else word(metric)


def curve(history: History, ax=None, metric: str | None = None, x: str = "step"):
    """Plot `metric` (held-out accuracy if the run has it, else the training loss) against
    steps, or against cumulative MB sent per worker (`x="bytes"`). Call it for several runs
    with the same `ax` to compare them; returns the axes."""
    if not isinstance(history, History):
        raise TypeError(f"curve needs a milktea.simulate.History, got {type(history).__name__}")
    if x not in ("step", "bytes"):
        raise ValueError(f"x must be 'step' or 'bytes', got {x!r}")
    h = history
    metric = metric or ("accuracy" if "accuracy" in h.evals else "train loss")
    if metric == "train loss":
        steps, ys = list(range(1, h.steps + 1)), h.loss
    elif metric in h.evals:
        steps, ys = h.eval_steps, h.evals[metric]
    else:
        raise ValueError(f"metric must be 'train loss' or one of {sorted(h.evals)}, got {metric!r}")
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=(6, 4))
    if x == "bytes":
        cum, total = [0.0], 0.0
        for b in h.bytes_per_worker:
            total += b
            cum.append(total)
        xs, label = [cum[s] / 1e6 for s in steps], _("MB sent per worker")
    else:
        xs, label = steps, _("step")
    ax.plot(xs, ys, label=word(h.scheme))
    if metric in ("train loss", "loss", "error"):
        ax.set_yscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel(metric_name(metric, h.task))
    ax.legend()
    return ax
