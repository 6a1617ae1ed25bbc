"""What `compare` returns: a table, plots, JSON Lines; and the cost model's step prediction."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from milktea import cost
from milktea.i18n import N_, _, count
from milktea.tables import text_table, word
from milktea.timing import median

# Comparison.table's figures: heading -> (key in Comparison.rows, format); headings shown through the catalog
_HEADINGS = (N_("step ms"), N_("speedup"), N_("MB/step"), N_("ratio"), N_("model ms"), N_("model err"),
             N_("codec ms"), N_("loss"), N_("test acc"))
_FIGURES = {"step ms": ("step_ms", "{:.1f}"), "speedup": ("speedup", "{:.2f}x"), "MB/step": ("payload_mb", "{:.3f}"),
            "ratio": ("ratio", "{:.1f}x"), "model ms": ("predicted_ms", "{:.1f}"),
            "model err": ("model_error", "{:+.1%}"), "codec ms": ("codec_ms", "{:.1f}"),
            "loss": ("train_loss", "{:.3f}"), "test acc": ("accuracy", "{:.2%}")}


def predict_step(compute: dict, rec: dict, link: "cost.Link", workers: int) -> float:
    """The cost model's time for one step: forward, then backward bucket by bucket with the
    codec work on the same cores, each bucket's collectives on one link overlapping the
    backward of the next buckets (cost.overlapped_timeline), then the optimizer step.
    The collectives are the ones the step really issued (rec["ops"]), priced on `link`; the
    codec time is the slowest rank's (Run.finish), since every collective waits for it."""
    ops = rec.get("ops") or []
    buckets = max(1, int(rec.get("buckets") or 1))
    comm = sum(cost.comm_time(n, workers, link, kind) for kind, n in ops)
    codec = rec.get("compress_s", 0.0) + rec.get("decode_s", 0.0)
    back = [(compute["backward_s"] + codec) / buckets] * buckets
    tl = cost.overlapped_timeline(back, [comm / buckets] * buckets, forward=compute["forward_s"])
    return tl.total + compute["optimizer_s"]


def _median(xs):
    xs = list(xs)
    return median(xs) if xs else float("nan")


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


@dataclass
class Comparison:
    results: list[dict]
    model_link: "cost.Link"
    compute: dict
    where: str
    workers: int
    backend: str
    config: dict
    #: seconds per step of error feedback's least memory work on this machine (see
    #: ComputeProbe.floor); None where it was not measured
    floor_s: float | None = None

    @property
    def skip(self) -> int:
        """Warm-up steps left out of the timings: dense first step(s), first compressed step."""
        return min(3, self.config["steps"] // 2)

    @property
    def rows(self) -> list[dict]:
        out, dense_ms = [], None
        for res in self.results:
            row = {"scheme": res["scheme"], "label": res["label"]}
            if "error" in res:
                row["error"] = res["error"]
                out.append(row)
                continue
            recs = res["records"][self.skip:]
            row.update(
                step_ms=1e3 * _median([r["step_s"] for r in recs]),
                predicted_ms=1e3 * _median([r["predicted_s"] for r in recs]),
                payload_mb=_mean([r.get("payload_bytes", 0) for r in recs]) / 1e6,
                ratio=_mean([r.get("ratio", float("nan")) for r in recs]),
                comm_ms=1e3 * _mean([r.get("comm_s", 0) for r in recs]),
                link_ms=1e3 * _median([r.get("predicted_comm_s", 0) for r in recs]),
                codec_ms=1e3 * _mean([r.get("compress_s", 0) + r.get("decode_s", 0) for r in recs]),
                train_loss=_mean([r["loss"] for r in res["records"][-5:]]),
                test_loss=res["final"]["loss"], accuracy=res["final"]["accuracy"], params=res["params"])
            row["model_error"] = row["step_ms"] / row["predicted_ms"] - 1
            if res["scheme"] == "dense":
                dense_ms = row["step_ms"]
            out.append(row)
        for row in out:
            if dense_ms and "step_ms" in row:
                row["speedup"] = dense_ms / row["step_ms"]
        return out

    def table(self) -> str:
        c = self.compute
        params = next((r["params"] for r in self.results if "params" in r), 0)
        lines = [_("{workers} workers ({backend}), {params} parameters, {steps} steps of {batch} examples per "
                   "worker, {where}").format(workers=self.workers, backend=self.backend, params=count(params),
                                             steps=self.config["steps"], batch=self.config["batch"], where=self.where),
                 _("cost model calibrated on this link: {link}; compute alone: forward {f:.1f} ms, backward "
                   "{b:.1f} ms, optimizer {o:.1f} ms (step times: median after {skip} warm-up steps)").format(
                     link=repr(self.model_link), f=1e3 * c["forward_s"], b=1e3 * c["backward_s"],
                     o=1e3 * c["optimizer_s"], skip=self.skip),
                 ""]
        shown = [{"scheme": word(r["label"]), "error": _("not run (see note)") if "error" in r else None,
                  **{head: r.get(key) for head, (key, _f) in _FIGURES.items()}} for r in self.rows]
        lines.append(text_table(shown, ["scheme", *_FIGURES], {head: f for head, (_k, f) in _FIGURES.items()},
                                right=_FIGURES, note="error"))
        notes = [_("{label}: {error}").format(label=word(r["label"]), error=r["error"])
                 for r in self.rows if "error" in r]
        for res in self.results:
            if res.get("decisions"):
                d = res["decisions"]
                why = _("; ").join(_("bucket {bucket}: {decision} (dense {dense:.1f} ms vs codec {codec:.1f} + link "
                                     "{link:.1f} ms)").format(bucket=x["bucket"], decision=_(x["decision"]),
                                                              dense=1e3 * x["dense_s"], codec=1e3 * x["codec_s"],
                                                              link=1e3 * x["compressed_comm_s"]) for x in d)
                notes.append(_("{label} compressed {n} of {total} buckets: {why}").format(
                    label=word(res["label"]), n=sum(x["decision"] == "compress" for x in d), total=len(d), why=why))
        lines.append("")
        lines.append(_("MB/step: what one worker hands to collectives per step; model: the calibrated cost "
                       "model for the collectives each scheme issued, plus the measured compute and the slowest "
                       "rank's codec time (each collective waits for it)."))
        lines += [_("note: {note}").format(note=n) for n in notes]
        bound = self.floor_line()
        if bound:
            lines.append(bound)
        return "\n".join(lines)

    def _floor_ms(self, row: dict) -> float:
        """compute + the measured floor (see ComputeProbe.floor) + the cost model's time for
        `row`'s bytes: no scheme with error feedback sending them steps faster here."""
        return 1e3 * (sum(self.compute.values()) + self.floor_s) + row["link_ms"]

    def bound(self, row: dict) -> float | None:
        """The most speedup over dense this machine allows a scheme with error feedback
        that sends `row`'s bytes; None where no floor was measured or no dense row ran."""
        if self.floor_s is None or "speedup" not in row:
            return None
        return row["step_ms"] * row["speedup"] / self._floor_ms(row)     # dense's step / the floor's

    def floor_line(self) -> str:
        """The bound, in words, for the fastest scheme of the table that keeps a ledger (the
        floor is error feedback's own memory work: a scheme without a ledger is not bound by it)."""
        from milktea.distributed.schemes import uses_ledger
        rows = [r for r in self.rows if "speedup" in r and r["scheme"] != "dense" and uses_ledger(r["scheme"])]
        if self.floor_s is None or not rows:
            return ""
        best = max(rows, key=lambda r: r["speedup"])
        return _("floor: error feedback's least memory work takes {floor:.1f} ms per step here (a model-sized "
                 "ledger += the gradient, the gradient's buffer rewritten; every rank at once), so a scheme with "
                 "error feedback steps no faster than compute + that + its link time: for {label}'s bytes "
                 "{ms:.0f} ms, {bound:.2f}x dense at most (measured {measured:.2f}x).").format(
            floor=1e3 * self.floor_s, label=word(best["label"]), ms=self._floor_ms(best), bound=self.bound(best),
            measured=best["speedup"])

    def __repr__(self) -> str:
        return self.table()

    def records(self) -> list[dict]:
        return [r for res in self.results for r in res.get("records", [])]

    def plot_time(self, ax=None):
        """Stacked bars per scheme: compute, codec, exposed communication; x = model's prediction."""
        import matplotlib.pyplot as plt
        rows = [r for r in self.rows if "error" not in r]
        if ax is None:
            _fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
        comp = 1e3 * sum(self.compute.values())
        for i, r in enumerate(rows):
            codec = min(r["codec_ms"], max(0.0, r["step_ms"] - comp))
            wait = max(0.0, r["step_ms"] - comp - codec)
            ax.barh(i, comp, color="tab:blue", label=_("compute") if i == 0 else None)
            ax.barh(i, codec, left=comp, color="tab:green", label=_("compress + decode") if i == 0 else None)
            ax.barh(i, wait, left=comp + codec, color="tab:orange",
                    label=_("waiting for the link") if i == 0 else None)
            ax.plot(r["predicted_ms"], i, "kx", label=_("cost model") if i == 0 else None)
        ax.set_yticks(range(len(rows)), [word(r["label"]) for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel(_("ms per step"))
        ax.set_title(_("step time, {where}").format(where=self.where.split(_(", "))[0]))
        ax.legend(loc="lower right", fontsize="small")
        return ax

    def plot_loss(self, axes=None):
        """Training loss against steps and against wall-clock time."""
        import matplotlib.pyplot as plt
        if axes is None:
            _fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for res in self.results:
            if "records" not in res:
                continue
            loss = [r["loss"] for r in res["records"]]
            t, clock = 0.0, []
            for r in res["records"]:
                t += r["step_s"]
                clock.append(t)
            axes[0].plot(range(1, len(loss) + 1), loss, label=word(res["label"]))
            axes[1].plot(clock, loss, label=word(res["label"]))
        axes[0].set_xlabel(_("step"))
        axes[1].set_xlabel(_("seconds"))
        for ax in axes:
            ax.set_ylabel(_("training loss"))
            ax.set_yscale("log")
        axes[1].legend(fontsize="x-small")
        return axes

    def save(self, folder: str = "results/compare", plots: bool = True) -> list[str]:
        """results.jsonl (one record per step per scheme), summary.json, and the two plots."""
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, "results.jsonl"), os.path.join(folder, "summary.json")]
        with open(paths[0], "w") as f:
            for rec in self.records():
                f.write(json.dumps(rec) + "\n")
        with open(paths[1], "w") as f:
            json.dump({"where": self.where, "workers": self.workers, "backend": self.backend,
                       "config": self.config, "compute": self.compute, "floor_s": self.floor_s,
                       "model_link": {"bandwidth": self.model_link.bandwidth, "latency": self.model_link.latency},
                       "rows": self.rows}, f, indent=1)
        if plots:
            from matplotlib.figure import Figure   # no pyplot: works headless, leaves notebooks alone
            rows = sum("error" not in r for r in self.rows)
            fig = Figure(figsize=(8, 0.45 * rows + 1.2))
            self.plot_time(fig.subplots())
            figs = [("compare_time.png", fig)]
            fig = Figure(figsize=(11, 4))
            self.plot_loss(fig.subplots(1, 2))
            figs.append(("compare_loss.png", fig))
            for name, fig in figs:
                path = os.path.join(folder, name)
                fig.tight_layout()
                fig.savefig(path, dpi=110)
                paths.append(path)
        return paths
