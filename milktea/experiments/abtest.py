"""The end-to-end A/B test in words and tables: a measured `milktea.distributed.compare`
run, each scheme's speedup over the fp32 and the bf16 all-reduce, where the cost model
misses, and where compression stops paying, all said from the run's own numbers through
`verdicts` (so "faster" is never printed beside a slower step).

    ab = compare(["dense", "torch-bf16", "int8"], workers=2, link_gbit=1.0, steps=20)
    show(speedup_rows(ab))          # step ms, speedup over fp32 and over bf16, noise
    Markdown(ab_verdict(ab))        # the fastest scheme against dense, within the run's noise
    show(crossing_rows(ab, gbits))  # where each scheme pays as the link changes, CPU and GPU codecs

Step time is not the point of training: `milktea.experiments.time_to_target` compares the
same runs by the time each takes to reach a target loss.
"""
from __future__ import annotations


from .. import cost
from ..i18n import N_, _
from ..tables import display_width, joined, pad, word
from ..timing import median
from . import verdicts

BF16 = ("torch-bf16", "bf16")
COLUMNS = (N_("vs fp32"), N_("vs bf16"), N_("noise"), N_("step ms"))   # table columns, for the catalog
#: crossing_rows' columns: against which baseline, with which codec times
CROSSING_COLUMNS = {("fp32", "here"): N_("vs fp32, codecs as timed here"),
                    ("fp32", "gpu"): N_("vs fp32, GPU codecs (assumed)"),
                    ("bf16", "here"): N_("vs bf16, codecs as timed here"),
                    ("bf16", "gpu"): N_("vs bf16, GPU codecs (assumed)")}


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
        behind = verdicts.gap(best.get("accuracy"), dense.get("accuracy"), _("dense"), 0.02)
        if behind.kind in ("behind", "nan"):
            text += " " + _("But it ends {gap} after {steps} steps: a short step is worth only the loss it buys, "
                            "which the time to a target loss measures.").format(
                gap=behind, steps=comparison.config["steps"])
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


def crossing_lines(gbits, curves: dict, noise: dict | None = None) -> list[str]:
    """For each re-priced curve: where it pays, in words (`breakeven.where_it_pays`), with
    `noise[label]` (relative) as the band within which it is level with the baseline."""
    from .breakeven import where_it_pays
    out = []
    names = {k: word(k) for k in curves if k != "gbit"}
    width = max((display_width(v) for v in names.values()), default=0)
    for label, speedups in curves.items():
        if label == "gbit":
            continue
        said = where_it_pays(gbits, speedups, (noise or {}).get(label, 0.0))
        out.append(pad(names[label], width) + "  " + said)
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


def crossing_rows(comparison, gbits, mem_gbps: float = 2000.0) -> list[dict]:
    """Where each scheme pays as only the link changes (`reprice`), against the fp32
    all-reduce and, where a bf16 run finished, against the bf16 all-reduce; each twice: with
    the codec times measured in the run (on this machine), and with the codecs a GPU would
    run if they streamed at `mem_gbps` GB/s of memory bandwidth (`reprice.gpu_codecs`, an
    assumption). A curve within the run's noise of its baseline (the noise of both schemes'
    steps) is said to be level with it."""
    from ..distributed.reprice import gpu_codecs, reprice
    from .breakeven import where_it_pays
    rows = _ok(comparison)
    bases = [("fp32", rows[0]["label"])]
    bf = bf16_row(comparison, rows)
    if bf is not None:
        bases.append(("bf16", bf["label"]))
    out = {r["label"]: {"scheme": r["label"]} for r in rows}
    for base, base_label in bases:
        for codecs, codec in (("here", None), ("gpu", gpu_codecs(comparison, mem_gbps))):
            curves = reprice(comparison, gbits, baseline=base_label, codec=codec)
            column = CROSSING_COLUMNS[(base, codecs)]
            out[base_label][column] = "—"
            for label, speedups in curves.items():
                if label != "gbit" and label in out:
                    noise = max(step_noise(comparison, label), step_noise(comparison, base_label))
                    out[label][column] = str(where_it_pays(gbits, speedups, noise))
    return list(out.values())


def crossing_note(comparison, mem_gbps: float = 2000.0) -> str:
    """What the crossings rest on, beside them: the codec times were measured on this
    machine's CPU (the bf16 baseline's cast named with its time), what a GPU at `mem_gbps`
    GB/s would take for the same bytes (an assumption), and the schemes whose codec the GPU
    columns could not model (their measured codec is kept there)."""
    from ..distributed.reprice import gpu_codecs
    gpu = gpu_codecs(comparison, mem_gbps)
    rows = _ok(comparison)
    bf = bf16_row(comparison, rows)
    text = _("Every crossing above rests on codec times measured on this machine's CPU, which a GPU does not share.")
    if bf is not None and bf["label"] in gpu:
        text += " " + _("bf16's cast, for instance, took {cpu:.1f} ms per step here; a GPU that streams the same "
                        "bytes at an assumed {gbps:g} GB/s of memory bandwidth would take {gpu:.3f} ms.").format(
            cpu=bf["codec_ms"], gbps=mem_gbps, gpu=1e3 * gpu[bf["label"]])
    text += " " + _("The GPU columns re-price each run with such codec times: an assumption (kernels that stream at "
                    "the memory's bandwidth; an exact Top-K selects, and runs slower), not a measurement.")
    kept = [word(r["label"]) for r in rows if r["label"] not in gpu and r.get("codec_ms", 0) > 0]
    if kept:
        text += " " + _("No GPU model for {names}: their measured codec stays in those columns.").format(
            names=joined(kept))
    return verdicts.tidy(text)
