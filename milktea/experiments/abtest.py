"""The end-to-end A/B test in words and tables: a measured `milktea.distributed.compare`
run, each scheme's speedup over the fp32 and the bf16 all-reduce, where the cost model
misses, and where compression stops paying, all said from the run's own numbers through
`verdicts` (so "faster" is never printed beside a slower step).

    ab = compare(["dense", "torch-bf16", "int8"], workers=2, link_gbit=1.0, steps=20)
    show(speedup_rows(ab))          # step ms, speedup over fp32 and over bf16, noise
    Markdown(ab_verdict(ab))        # the fastest scheme against dense, within the run's noise
"""
from __future__ import annotations

import math

from .. import cost
from ..i18n import N_, _
from ..tables import display_width, joined, pad, word
from ..timing import median
from . import verdicts

BF16 = ("torch-bf16", "bf16")
COLUMNS = (N_("vs fp32"), N_("vs bf16"), N_("noise"), N_("step ms"))   # table columns, for the catalog        # the schemes that count as the bf16 baseline, first found wins


def _ok(comparison) -> list[dict]:
    return [r for r in comparison.rows if "error" not in r]


def step_noise(comparison, label: str, floor: float = 0.02) -> float:
    """The relative noise of one scheme's timed steps (half their interquartile range over
    their median, at least `floor`): differences smaller than this are not measurable."""
    for res in getattr(comparison, "results", ()):
        if res["label"] == label and "records" in res:
            recs = res["records"][comparison.skip:] or res["records"]
            return verdicts.noise_of([r["step_s"] for r in recs], floor)
    return floor


def bf16_row(comparison, rows: list[dict] | None = None) -> dict | None:
    """The bf16 all-reduce's row of a comparison (among `rows`, by default its finished
    rows), if one ran."""
    rows = _ok(comparison) if rows is None else rows
    return next((r for name in BF16 for r in rows if r.get("scheme") == name), None)


def _ms(x: float) -> str:
    return f"{x:.1f}" if abs(x) < 10 else f"{x:.0f}"


def speedup_rows(comparison) -> list[dict]:
    """One row per scheme: step ms, speedup over the fp32 all-reduce (dense) and over the
    bf16 all-reduce (where one ran), and the step's noise; failed runs keep their note."""
    rows, bf = [], bf16_row(comparison)
    for r in comparison.rows:
        if "error" in r:
            rows.append({"scheme": r["label"], "step ms": float("nan"), "note": r["error"][:60]})
            continue
        row = {"scheme": r["label"], "step ms": r["step_ms"], "vs fp32": r.get("speedup", float("nan"))}
        if bf is not None:
            row["vs bf16"] = bf["step_ms"] / r["step_ms"]
        row["noise"] = step_noise(comparison, r["label"])
        rows.append(row)
    return rows


def ab_verdict(comparison, plot_note: bool = True) -> str:
    """Dense's step, bf16's, and the fastest scheme against both, in one paragraph (with a
    note on reading the step-time plot, unless `plot_note` is False)."""
    rows = _ok(comparison)
    dense = rows[0]
    best = min(rows, key=lambda r: r["step_ms"])
    noise = lambda r: max(step_noise(comparison, r["label"]), step_noise(comparison, dense["label"]))  # noqa: E731
    text = _("{where}, {workers} workers. Dense (fp32) takes **{ms} ms** per step.").format(
        where=comparison.where, workers=comparison.workers, ms=_ms(dense["step_ms"]))
    bf = bf16_row(comparison, rows)
    if bf is not None:
        text += " " + _("The bf16 all-reduce, half the bytes with no tuning: {said}.").format(
            said=verdicts.compare_speed(word(bf["label"]), bf["step_ms"], word(dense["label"]), dense["step_ms"], noise(bf)))
    if best is dense:
        text += " " + _("No scheme's step was shorter than dense's.")
    elif best is bf:
        text += " " + _("No other scheme's step was shorter than bf16's.")
    else:
        text += " " + _("The shortest step: {said}.").format(
            said=verdicts.compare_speed(word(best["label"]), best["step_ms"], word(dense["label"]), dense["step_ms"],
                                         noise(best)))
        if bf is not None:
            text += " " + _("Against bf16: {said}.").format(
                said=verdicts.compare_speed(word(best["label"]), best["step_ms"], word(bf["label"]), bf["step_ms"],
                                            max(noise(best), noise(bf))))
    if not plot_note:
        return verdicts.tidy(text)
    text += " " + _("The crosses mark the calibrated cost model's prediction from the bytes each scheme really "
                    "sent plus its measured compute and codec time. Where a compressed scheme is slower than its "
                    "bytes suggest, look at its codec time: on a CPU, compressing can cost as much as the link saves.")
    return verdicts.tidy(text)


def model_errors(comparison) -> list[dict]:
    """Where the cost model misses, per scheme of a measured comparison: measured and predicted
    step, and the time inside the collectives, measured and as the model prices the collectives
    the steps really issued (on the calibrated link). Medians over the timed steps (ms)."""
    out = []
    for res in comparison.results:
        if "records" not in res:
            continue
        recs = res["records"][comparison.skip:] or res["records"]
        priced = median(sum(cost.comm_time(n, comparison.workers, comparison.model_link, kind)
                            for kind, n in r.get("ops") or []) for r in recs)
        row = next(r for r in comparison.rows if r["label"] == res["label"])
        out.append({"scheme": res["label"], "measured ms": row["step_ms"], "predicted ms": row["predicted_ms"],
                    "model error": row["step_ms"] / row["predicted_ms"] - 1,
                    "collectives, measured ms": row.get("comm_ms", float("nan")),
                    "collectives, priced ms": 1e3 * priced})
    return out


def model_error_sentence(comparison, tolerance: float = 0.2) -> str:
    """One paragraph on the cost model's misses in a measured comparison: per scheme off by
    more than `tolerance`, the gap (measured minus predicted) cut into the part inside the
    collectives and the rest, both signed, so the two always add up to the gap."""
    rows = model_errors(comparison)
    said = {r["scheme"]: verdicts.model_error(r["measured ms"], r["predicted ms"], tolerance) for r in rows}
    good = [word(r["scheme"]) for r in rows if said[r["scheme"]].kind == "within"]
    if good:
        text = _("The cost model is within ±{tolerance:.0%} of the measured step for {names}.").format(
            tolerance=tolerance, names=joined(good))
    else:
        text = _("The cost model is off by more than ±{tolerance:.0%} for every scheme.").format(tolerance=tolerance)
    bad = [r for r in rows if said[r["scheme"]].kind != "within"]
    for r in bad:
        whole = r["measured ms"] - r["predicted ms"]
        inside = r["collectives, measured ms"] - r["collectives, priced ms"]
        text += " " + _("**{scheme}**: predicted {p:.1f} ms, measured {m:.1f} ms, {err}; its collectives took "
                        "{cm:.1f} ms against {cp:.1f} ms priced: {split}.").format(
            scheme=word(r["scheme"]), p=r["predicted ms"], m=r["measured ms"], err=said[r["scheme"]],
            cm=r["collectives, measured ms"], cp=r["collectives, priced ms"],
            split=verdicts.split(whole, inside, _("inside the collectives"), _("outside them")))
    if bad:
        text += " " + _("A positive part inside the collectives is time the model did not price there: waiting for "
                        "the other rank, each collective's fixed costs beyond the fitted α (PowerSGD issues two "
                        "all-reduces one after the other, a sparse all-gather first exchanges sizes). A positive part "
                        "outside them is work the codec timer does not cover, such as the hook's own Python. A "
                        "negative part is time the model priced that the run did not spend. Read the predictions as "
                        "a guide to where time goes, not as a stopwatch.")
    return verdicts.tidy(text)


def behind_dense(comparison, points: float = 5.0) -> str:
    """A line naming the schemes more than `points` accuracy points behind dense ('' if none)."""
    rows = _ok(comparison)
    dense = rows[0]
    behind = [r for r in rows[1:] if verdicts.gap(r.get("accuracy"), dense["accuracy"], dense["label"],
                                                  points / 100).kind == "behind"]
    if not behind:
        return verdicts.tidy("")
    names = joined(_("{name} ({gap})").format(name=word(r["label"]),
                                              gap=verdicts.gap(r["accuracy"], dense["accuracy"], _("dense")))
                   for r in behind)
    return verdicts.tidy(_("More than {points:g} points behind dense after {steps} steps: {names}.").format(
        points=points, steps=comparison.config["steps"], names=names))


def crossing_lines(gbits, curves: dict) -> list[str]:
    """For each re-priced curve: where compression stops paying, in words."""
    from ..distributed.reprice import crossing
    out = []
    names = {k: word(k) for k in curves if k != "gbit"}
    width = max((display_width(v) for v in names.values()), default=0)
    for label, speedups in curves.items():
        if label == "gbit":
            continue
        b = crossing(gbits, speedups)
        where = (_("pays on every link tried") if b == math.inf else
                 _("never pays here") if b == 0 else _("stops paying above {b:.2g} Gbit/s").format(b=b))
        out.append(pad(names[label], width) + "  " + where)
    return out


def loopback_verdict(fast, slow) -> str:
    """What the loopback run (`fast`, no emulated link) says, from its numbers: its dense step
    against the emulated link's (`slow`, a comparison), and each compressed scheme faster,
    slower or no different from dense within the run's noise. The two runs are separate, so
    a change of load between them shows up as a loopback step no faster than the slow link's."""
    rows = _ok(fast)
    dense = rows[0]
    slow_dense = _ok(slow)[0]
    kinds = {}
    for r in rows[1:]:
        noise = max(step_noise(fast, r["label"]), step_noise(fast, dense["label"]))
        kinds[word(r["label"])] = verdicts.speed(r["step_ms"], dense["step_ms"], noise).kind
    slower = [k for k, v in kinds.items() if v == "slower"]
    faster = [k for k, v in kinds.items() if v == "faster"]
    link_noise = max(step_noise(fast, dense["label"]), step_noise(slow, slow_dense["label"]))
    against = verdicts.compare_speed(_("loopback"), dense["step_ms"], _("the emulated link"), slow_dense["step_ms"],
                                     link_noise)
    text = _("On loopback a dense step takes {ms:.1f} ms, {comm:.1f} ms of it inside the all-reduce, against "
             "{slow:.0f} ms on the emulated link: {said}.").format(ms=dense["step_ms"], comm=dense["comm_ms"],
                                                                  slow=slow_dense["step_ms"], said=against)
    if against.kind != "faster":
        text += " " + _("A link with nothing emulated should be the faster one: the load on this machine changed "
                        "between the two runs, so compare only numbers measured side by side, in one run.")
    text += " " + _("Slower than dense here: {slower}; faster: {faster}; the rest within the run's noise.").format(
        slower=joined(slower) or _("none"), faster=joined(faster) or _("none"))
    if len(slower) == len(rows) - 1:
        return verdicts.tidy(text + " " + _("When the link is not the bottleneck, the best compressor is none."))
    if faster:
        text += " " + _("Even loopback is not free on a busy CPU (the bytes are copied through the kernel), so a "
                        "scheme with a cheap codec can still win a little here; the re-priced curves above show a "
                        "link that is really fast.")
    return verdicts.tidy(text)


def table_rows(comparison) -> list[dict]:
    """The A/B table: per scheme its step, speedup over fp32 and over bf16 (where a bf16 run
    finished), bytes and ratio, codec time, the model's prediction and accuracy."""
    bf = bf16_row(comparison)
    rows = []
    for r in comparison.rows:
        if "error" in r:
            rows.append({"label": r["label"], "step_ms": float("nan")})
            continue
        row = {"label": r["label"], "step_ms": r["step_ms"], "vs fp32": r.get("speedup", float("nan"))}
        if bf is not None:
            row["vs bf16"] = bf["step_ms"] / r["step_ms"]
        row.update({k: r.get(k) for k in ("payload_mb", "ratio", "codec_ms", "predicted_ms", "accuracy")})
        rows.append(row)
    return rows


def crossing_report(comparison, gbits, curves: dict | None = None) -> str:
    """Where each scheme stops paying as the link gets faster, against the fp32 all-reduce
    and, where a bf16 run finished, against the bf16 all-reduce (re-priced curves)."""
    from ..distributed.reprice import reprice
    curves = reprice(comparison, gbits) if curves is None else curves
    lines = [_("Against the fp32 all-reduce:")] + ["  " + line for line in crossing_lines(gbits, curves)]
    bf = bf16_row(comparison)
    if bf is not None:
        against = reprice(comparison, gbits, baseline=bf["label"])
        lines += ["", _("Against the bf16 all-reduce:")] + ["  " + line for line in crossing_lines(gbits, against)]
    return "\n".join(lines)
