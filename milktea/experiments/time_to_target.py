"""Time to a target loss, not step time: schemes compared by how long each takes to reach
the loss a baseline reaches, the methodology of Agarwal et al. ("On the utility of gradient
compression in distributed training systems", MLSys 2022: measured this way, against
well-tuned synchronous training with bf16 all-reduce, compression paid in few of more than
200 settings). A shorter step that buys less progress per step can arrive later.

In a measured `milktea.distributed.compare` run every scheme trains on the same batches,
step by step, so their losses at a step differ by what the scheme did, not by the data.
Each scheme's training loss (one value per step, averaged over the ranks) is smoothed over
`window` steps; the target is the baseline's smoothed loss after a share `at` of its steps
(the bf16 all-reduce where it ran, else the fp32 one); a scheme's steps to the target are
the first step at which its smoothed loss is at or below it, and its time is those steps
times its median step (the warm steps the A/B table reports).

    >>> steps_to_target([2.0, 1.5, 1.0, 0.8, 0.6], target=1.0, window=2)
    4
    >>> steps_to_target([2.0, 1.9, 1.8], target=1.0) is None       # not reached in the run
    True
"""
from __future__ import annotations

import math

from ..i18n import N_, _
from ..tables import word
from . import verdicts

COLUMNS = (N_("steps to target"), N_("time to target s"), N_("vs baseline"))


def smoothed(losses, window: int = 3) -> list[float]:
    """The mean of each loss and the `window` - 1 before it (fewer at the start).

    >>> smoothed([3.0, 1.0, 2.0], window=2)
    [3.0, 2.0, 1.5]
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    xs = [float(v) for v in losses]
    return [sum(xs[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(xs))]


def steps_to_target(losses, target: float, window: int = 3) -> int | None:
    """How many steps it took until the smoothed loss was at or below `target` (None: not
    within these losses, or a loss that stopped being finite first)."""
    for i, v in enumerate(smoothed(losses, window)):
        if not math.isfinite(v):
            return None
        if v <= target:
            return i + 1
    return None


def time_to_target(comparison, at: float = 0.75, window: int = 3, baseline: str | None = None) -> dict:
    """Each finished scheme of a measured comparison by its time to the baseline's loss (see
    the module's docstring). Returns {"baseline", "target", "at step", "steps", "rows"}; a
    row: scheme, steps to target (None: not reached), step ms, time to target s (the lower
    bound steps × step where not reached), vs baseline (baseline time / this time), the
    verdict's kind (faster, slower, same, unknown) and the verdict `said`."""
    from .abtest import _ok, bf16_row, step_noise
    if not 0 < at <= 1:
        raise ValueError(f"at must be a share of the baseline's steps in (0, 1], got {at!r}")
    rows = _ok(comparison)
    losses = {res["label"]: [r["loss"] for r in res["records"]] for res in comparison.results if "records" in res}
    if baseline is None:
        bf = bf16_row(comparison, rows)
        baseline = (bf or rows[0])["label"]
    if baseline not in losses:
        raise ValueError(f"baseline {baseline!r} is not a finished run of this comparison: {list(losses)}")
    n = len(losses[baseline])
    k = max(1, min(n, round(at * n)))
    target = smoothed(losses[baseline], window)[k - 1]
    step_ms = {r["label"]: r["step_ms"] for r in rows}
    base_steps = steps_to_target(losses[baseline], target, window)
    base_t = base_steps * step_ms[baseline] / 1e3
    out = []
    for r in rows:
        label = r["label"]
        steps = steps_to_target(losses[label], target, window)
        # one step either way is within one seed's luck; the step times have their own noise
        noise = max(step_noise(comparison, label), step_noise(comparison, baseline)) + 1 / base_steps
        t = (steps if steps is not None else len(losses[label])) * step_ms[label] / 1e3
        said = verdict(t, base_t, noise, reached=steps is not None)
        out.append({"scheme": label, "steps to target": steps, "step ms": step_ms[label], "time to target s": t,
                    "vs baseline": base_t / t if steps is not None else float("nan"), "kind": said.kind,
                    "said": said})
    return {"baseline": baseline, "target": target, "at step": k, "steps": n, "window": window, "rows": out}


def verdict(t: float, base_t: float, noise: float, reached: bool = True) -> verdicts.Said:
    """A scheme's time to the target against the baseline's: faster, slower or no measurable
    difference within `noise` (relative); where the scheme did not reach it (`t` is then the
    run's length, a lower bound), slower if even that bound is beyond the noise, else
    "unknown": the run was too short to tell. kind: faster, slower, same, unknown.

    >>> verdict(2.0, 1.0, 0.1, reached=False)
    'not reached, and the whole run already took 2.00x as long as the baseline needed'
    >>> verdict(0.9, 1.0, 0.2, reached=False).kind
    'unknown'
    """
    if reached:
        return verdicts.speed(t, base_t, noise)
    if t > base_t * (1 + noise):
        return verdicts.Said(_("not reached, and the whole run already took {r}x as long as the baseline needed").format(
            r=f"{t / base_t:.2f}"), "slower")
    return verdicts.Said(_("not reached within the run: too short to tell"), "unknown")


def sentence(tt: dict) -> str:
    """`time_to_target`'s result in words: the target and where it comes from, each scheme's
    steps and time against the baseline's, and which reached it soonest (within the noise)."""
    rows = {r["scheme"]: r for r in tt["rows"]}
    base = rows[tt["baseline"]]
    text = _("Time to a target loss (the methodology of Agarwal et al., MLSys 2022): the target is {target:.3f}, the "
             "{w}-step mean of {base}'s training loss at step {k} of its {n}. {base} first gets that low at step "
             "{s}, in {t:.2f} s.").format(base=word(base["scheme"]), k=tt["at step"], n=tt["steps"],
                                              target=tt["target"], w=tt["window"], s=base["steps to target"],
                                              t=base["time to target s"])
    parts = []
    for r in tt["rows"]:
        if r is base:
            continue
        if r["steps to target"] is None:
            parts.append(_("{name}: {said} ({t:.2f} s)").format(name=word(r["scheme"]), said=r["said"],
                                                                 t=r["time to target s"]))
        else:
            parts.append(_("{name}: step {s}, {t:.2f} s, {said}").format(
                name=word(r["scheme"]), s=r["steps to target"], t=r["time to target s"], said=r["said"]))
    if parts:
        text += " " + _("Against it: {parts}.").format(parts=_("; ").join(parts))
    faster = [r for r in tt["rows"] if r["kind"] == "faster"]
    if faster:
        best = min(faster, key=lambda r: r["time to target s"])
        text += " " + _("Reached the target soonest: {name}.").format(name=word(best["scheme"]))
    else:
        text += " " + _("No scheme reached the target measurably sooner than {base}.").format(
            base=word(base["scheme"]))
    text += " " + _("One seed and a short run: a step or two either way is within its luck (counted in the noise); "
                    "train longer before you trust a small difference.")
    return verdicts.tidy(text)


def table_rows(tt: dict) -> list[dict]:
    """The rows for a table: scheme, steps to target ('—' where not reached), step ms, time
    to target s, vs baseline."""
    return [{"scheme": r["scheme"], "steps to target": r["steps to target"] if r["steps to target"] else "—",
             "step ms": r["step ms"], "time to target s": r["time to target s"] if r["steps to target"] else "—",
             "vs baseline": r["vs baseline"] if r["steps to target"] else "—"} for r in tt["rows"]]
