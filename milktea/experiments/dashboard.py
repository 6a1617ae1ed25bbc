"""The head-office dashboard's data: a real multi-worker run of several schemes whose
per-step records stream to the notebook while it trains, the pipeline's stage times, and
the evaluation table.

    rec = Recorder(batch=32, workers=2)
    result = live_run(["dense", "torch-fp16", "sign"], on_record=rec, steps=20)
    rec.series["dense all-reduce"]["throughput"]     # samples per second, one per step
    evaluation(result)                               # speed, bytes, accuracy, complexity

`live_run` launches the same worker as `milktea.distributed.compare` (calibration, compute
profile, then every scheme in turn) with a message channel of its own, so each step's
record reaches `on_record` while the workers go on training.
"""
from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field

import torch

from .. import cost
from ..i18n import N_, _
from ..tables import joined, word
from ..timing import median, time_it

# How much a scheme asks of its user: (score 0..4, what it takes)
COMPLEXITY = {
    "dense": (0, N_("nothing")),
    "torch-fp16": (1, N_("one line; fp16 range")), "torch-bf16": (1, N_("one line")), "fp16": (1, N_("fp16 range")),
    "bf16": (1, N_("nothing")),
    "int8": (2, N_("chunk size")), "int4": (2, N_("chunk size, stochastic rounding")), "qsgd": (2, N_("levels")),
    "terngrad": (2, N_("nothing")),
    "torch-powersgd": (3, N_("rank, warm-up")), "torch-batched-powersgd": (3, N_("rank, warm-up")),
    "powersgd": (3, N_("rank, error feedback")), "powersgd-batched": (3, N_("rank, error feedback")),
    "topk": (4, N_("ratio, error feedback, warm-up")), "topk-approx": (4, N_("ratio, error feedback, warm-up")),
    "topk-int8": (4, N_("ratio, error feedback, warm-up")), "randomk": (4, N_("ratio, error feedback")),
    "sign": (4, N_("error feedback, learning rate")), "auto": (4, N_("a calibrated link model")),
    "topk-mc": (4, N_("ratio, error feedback, momentum correction")),
    "sign-mc": (4, N_("error feedback, momentum correction")),
}


@dataclass
class Recorder:
    """Per-scheme curves built from records as they arrive: throughput (samples/s over all
    workers), step latency (ms), bytes on the wire (cumulative MB per worker), loss."""
    batch: int
    workers: int
    series: dict = field(default_factory=dict)
    current: str = ""
    steps: int = 0
    done: list = field(default_factory=list)
    updates: int = 0
    started: float = field(default_factory=time.perf_counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __call__(self, rank: int, msg) -> None:
        """The on_message callback of milktea.distributed.launch (rank 0's messages)."""
        with self._lock:
            self._take(msg)

    def snapshot(self) -> tuple[dict, str]:
        """(a copy of the series, the status line), safe to read while records arrive."""
        with self._lock:
            return copy.deepcopy(self.series), self.status

    def _take(self, msg) -> None:
        kind = msg[0]
        if kind == "start":                    # ("start", what, total steps over all schemes)
            self.steps = msg[-1]
        elif kind == "step":
            self.add(msg[1])
        elif kind == "done":
            self.done = list(self.series)
        self.updates += 1

    def add(self, rec: dict) -> None:
        label = rec.get("label", rec.get("scheme", "?"))
        self.current = label
        s = self.series.setdefault(label, {k: [] for k in ("step", "throughput", "latency_ms", "wire_mb", "loss")})
        s["step"].append(rec["step"] + 1)
        s["latency_ms"].append(1e3 * rec["step_s"])
        s["throughput"].append(self.batch * self.workers / rec["step_s"] if rec["step_s"] > 0 else float("nan"))
        prev = s["wire_mb"][-1] if s["wire_mb"] else 0.0
        s["wire_mb"].append(prev + rec.get("wire_bytes", 0.0) / 1e6)
        s["loss"].append(rec["loss"])

    @property
    def status(self) -> str:
        if not self.series:
            return _("waiting for the workers (starting processes, calibrating the link, timing compute)")
        seen = sum(len(s["step"]) for s in self.series.values())
        took = time.perf_counter() - self.started
        if self.done:
            return _("{v} schemes done, {seen} steps in {took:.0f} s").format(v=len(self.done), seen=seen, took=took)
        return (_("{seen} of {v} steps, {v2} schemes so far, latest: <b>{current}</b>; {took:.0f} s since start").format(seen=seen, v=self.steps or '?', v2=len(self.series), current=self.current, took=took))


def live_run(names, on_record=None, config=None, *, workers: int = 2, interleave: bool | None = None,
             timeout: float | None = None, ranks=None, **settings):
    """Train every scheme in `names` on `workers` local ranks, calling `on_record(rank,
    message)` with each message rank 0 sends while it trains; return the same
    `milktea.distributed.report.Comparison` as `compare`. `config`: a TrainConfig (task,
    model size, link, steps...; default: the digits MLP 16,384 wide, 20 steps, an emulated
    1 Gbit/s link); `settings`: TrainConfig fields applied on top (steps=5, task="gpt",
    link_gbit=None for loopback...). With `interleave` (the default when the models fit in
    memory) the schemes take turns step by step, so every curve grows at once and all of
    them see the same load. `ranks`: a Pool already up (see `milktea.distributed.compare.ready`)."""
    from ..distributed.compare import compare
    from ..distributed.train import TrainConfig
    if config is None:
        config = TrainConfig(steps=20, hidden=16384, link_gbit=1.0)
    return compare(names, config, workers=workers, interleave=interleave, progress=False,
                   on_message=on_record, timeout=timeout, ranks=ranks, **settings)


def evaluation(comparison, tt: dict | None = None) -> list[dict]:
    """The multi-scheme table: speed (over fp32 and, where a bf16 run finished, over bf16),
    time to the target loss (`time_to_target`, against bf16 where it ran), bytes, accuracy
    and what each scheme asks of you."""
    from .abtest import bf16_row
    from .time_to_target import time_to_target
    bf = bf16_row(comparison)
    tt = time_to_target(comparison) if tt is None else tt
    to_target = {r["scheme"]: r for r in tt["rows"]}
    rows = []
    for r in comparison.rows:
        if "error" in r:
            rows.append({"scheme": r["label"], "step ms": float("nan"), "note": r["error"][:60]})
            continue
        score, needs = COMPLEXITY.get(r["scheme"], (None, ""))
        row = {"scheme": r["label"], "step ms": r["step_ms"], "speedup": r.get("speedup", float("nan"))}
        if bf is not None:
            row["vs bf16"] = bf["step_ms"] / r["step_ms"]
        t = to_target.get(r["label"])
        row["time to target s"] = t["time to target s"] if t and t["steps to target"] else "—"
        row.update({"MB per step": r["payload_mb"], "R": r["ratio"], "test accuracy": r["accuracy"],
                    "complexity": score, "needs": needs})
        rows.append(row)
    return rows


def repriced(comparison, gbit: float, latency: float | None = None, keep_residual: bool = True,
             codec: dict | None = None, tt: dict | None = None) -> list[dict]:
    """Each scheme's step time and throughput if the same run had a `gbit` link
    (`milktea.distributed.reprice.repriced_times`, which this only tabulates; `codec`: codec
    seconds per step to use instead of the measured ones, e.g. `reprice.gpu_codecs`). With
    `tt` (a `time_to_target` result) also each scheme's time to the target at that link:
    its steps to the target times its re-priced step."""
    from ..distributed.reprice import repriced_times
    latency = comparison.model_link.latency if latency is None else latency
    times = repriced_times(comparison, cost.Link.gbit(gbit, latency), keep_residual, codec)
    batch = comparison.config["batch"] * comparison.workers
    rows = [{"scheme": label, "step ms": 1e3 * t, "samples/s": batch / t} for label, t in times.items()]
    dense = next((r["step ms"] for r in rows if r["scheme"].startswith("dense")), None)
    bf = next((r["step ms"] for r in rows if "bf16" in r["scheme"]), None)
    steps = {r["scheme"]: r["steps to target"] for r in (tt or {}).get("rows", [])}
    for r in rows:
        r["speedup"] = dense / r["step ms"] if dense else float("nan")
        if bf is not None:
            r["vs bf16"] = bf / r["step ms"]
        if tt is not None:
            n = steps.get(r["scheme"])
            r["time to target s"] = n * r["step ms"] / 1e3 if n else float("nan")
    return rows


STAGES = ("compute", "compress", "encode", "communicate", "decode", "update")
STAGE_NAMES = (N_("compute"), N_("compress"), N_("encode"), N_("communicate"), N_("decode"), N_("update"))


def stage_times(comparison, scheme: str, compressor=None, repeats: int = 5) -> list[dict]:
    """One step of `scheme` through the six stages, from the real run where it measured them:
    compute and update (its compute profile), communicate (its mean time inside collectives),
    compress and decode (its mean codec times, the slowest rank's: what the A/B table calls
    codec ms). Encoding a packet into bytes happens inside the run's compress; its share is
    timed here, in this process, on a gradient of the model's size with `compressor` (warm,
    the median of `repeats`), and taken out of compress. None: a dense step, no codec stages."""
    from ..packet import Packet  # noqa: F401  (the packet's bytes: Packet.to_tensor)
    res = next((r for r in comparison.results if r.get("scheme") == scheme and "records" in r), None)
    if res is None:
        raise ValueError(f"no finished run of {scheme!r} in this comparison")
    recs = res["records"][comparison.skip:] or res["records"]
    mean = lambda k: sum(r.get(k, 0.0) for r in recs) / len(recs)   # noqa: E731
    c = comparison.compute
    numel = res["params"]
    dense_bytes = 4 * numel
    stages = {"compute": (c["forward_s"] + c["backward_s"], dense_bytes), "update": (c["optimizer_s"], dense_bytes)}
    wire = mean("payload_bytes")
    stages["communicate"] = (mean("comm_s"), wire)
    if compressor is None:
        stages.update(compress=(0.0, dense_bytes), encode=(0.0, dense_bytes), decode=(0.0, dense_bytes))
    else:
        x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
        p = compressor.compress(x)
        data = p.to_tensor()
        encode = min(median(time_it(p.to_tensor, repeat=repeats, warmup=2)), mean("compress_s"))
        stages.update(compress=(mean("compress_s") - encode, p.payload_nbytes), encode=(encode, data.numel()),
                      decode=(mean("decode_s"), dense_bytes))
    return [{"stage": s, "seconds": stages[s][0], "bytes": stages[s][1]} for s in STAGES]


def stage_sentence(comparison, scheme: str, stages: list[dict]) -> str:
    """The stages beside the run's measured step: their sum against the median step the A/B
    table reports, and what the difference is (waiting and the hook's own work where the
    step is longer; overlap where it is shorter)."""
    from . import verdicts
    row = next(r for r in comparison.rows if r.get("scheme") == scheme and "step_ms" in r)
    total = 1e3 * sum(s["seconds"] for s in stages)
    step = row["step_ms"]
    text = _("{name}: the six stages add up to {total:.1f} ms; the run's median step took {step:.1f} ms.").format(
        name=word(row["label"]), total=total, step=step)
    if step > total * 1.02:
        text += " " + _("The other {d:.1f} ms are in no stage: waiting for the slower rank, the hook's own Python, "
                        "the launch of each collective.").format(d=step - total)
    elif step < total * 0.98:
        text += " " + _("The step is {d:.1f} ms shorter than its stages added up: communication overlapped the "
                        "backward pass.").format(d=total - step)
    else:
        text += " " + _("The stages account for the whole step.")
    return verdicts.tidy(text)


def loss_trends(comparison, window: int = 3) -> list[dict]:
    """Each scheme's training loss at the start and the end of the run (means over `window`
    steps) and whether it rose: a loss that ends above where it began is diverging."""
    import math
    out = []
    for res in comparison.results:
        recs = res.get("records") or []
        loss = [r["loss"] for r in recs if "loss" in r]
        if len(loss) < 2:
            continue
        w = max(1, min(window, len(loss) // 2))
        first, last = sum(loss[:w]) / w, sum(loss[-w:]) / w
        finite = all(math.isfinite(v) for v in loss)
        out.append({"scheme": res["label"], "name": res.get("scheme", ""), "first loss": first, "last loss": last,
                    "diverging": (not finite) or last > first})
    return out


def loss_trend_sentence(comparison) -> str:
    """One paragraph from `loss_trends`: how each scheme's training loss moved (first and last
    steps averaged), and for a loss that rose, the advice that fits that scheme: momentum
    correction for a biased scheme sharing the optimizer's momentum, a warm-up for one that
    already has it, a smaller learning rate otherwise."""
    from ..distributed.schemes import corrects_momentum, uses_ledger
    from . import verdicts
    rows = loss_trends(comparison)
    said = {r["scheme"]: verdicts.trend(r["first loss"], r["last loss"]) for r in rows}
    runs = _("; ").join(_("{scheme} {trend}").format(scheme=word(r["scheme"]), trend=said[r["scheme"]]) for r in rows)
    bad = [r for r in rows if said[r["scheme"]].kind in ("rose", "diverged")]
    if not bad:
        return verdicts.tidy(_("Training loss over the run (first and last steps averaged): {runs}.").format(runs=runs))
    text = _("Training loss over the run (first and last steps averaged): {runs}. **A loss that ends above where it "
             "began is a warning**, whatever the accuracy after these few steps says: {names}.").format(
        runs=runs, names=joined(word(r["scheme"]) for r in bad))
    shared = [r for r in bad if uses_ledger(r["name"]) and not corrects_momentum(r["name"])]
    corrected = [r for r in bad if corrects_momentum(r["name"])]
    other = [r for r in bad if r not in shared and r not in corrected]
    if shared:
        text += " " + _("With the shared learning rate and momentum 0.9, a biased compressor's ledger feeds the "
                        "momentum large, delayed lumps (chapter 04): run it with momentum correction (the -mc "
                        "schemes), or give it its own learning rate.")
    if corrected:
        text += " " + _("Momentum correction does not remove the first steps' lumps: DGC also warms the sparsity up "
                        "over its first epochs (chapter 04). Over a run this short, train longer and see whether the "
                        "loss comes back down, or start compressing after a few dense steps (start_step).")
    if other:
        text += " " + _("A scheme without a ledger whose loss rises wants a smaller learning rate.")
    return verdicts.tidy(text)


def evaluation_sentence(comparison, table: list[dict] | None = None, tt: dict | None = None) -> str:
    """The evaluation table in words: the shortest step against dense and against bf16
    (faster, slower or no measurable difference within the steps' noise, and how far behind
    dense it ends), each scheme's time to the target loss against bf16's, and each scheme's
    accuracy against dense after these few steps."""
    from . import abtest, verdicts
    from .time_to_target import sentence, time_to_target
    tt = time_to_target(comparison) if tt is None else tt
    table = evaluation(comparison, tt) if table is None else table
    text = abtest.ab_verdict(comparison, plot_note=False) + " " + sentence(tt)
    dense = table[0]
    gaps = [_("{scheme} {gap}").format(scheme=word(r["scheme"]), gap=verdicts.gap(r.get("test accuracy"),
                                                                             dense["test accuracy"], _("dense"), 0.02))
            for r in table[1:]]
    text += " " + _("Test accuracy after {steps} steps, against dense's {acc:.1%}: {gaps}.").format(
        steps=comparison.config["steps"], acc=dense["test accuracy"], gaps=_("; ").join(gaps))
    text += " " + _("These are a few steps on one machine: use the table to find what breaks and what is slow, then "
                    "train longer before you believe small accuracy differences (within ±2 points they are read as "
                    "level here).")
    return verdicts.tidy(text)
