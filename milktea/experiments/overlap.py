"""Bucketed overlap of backward and communication: the cost model's timeline of one step,
the timeline a real run measured (see `overlap_probe`), and the bucket size that balances
per-message latency against overlap.

    >>> prof = Profile.uniform(layers=8, params_per_layer=1_000_000, backward_s=0.08)
    >>> tl = predict_timeline(prof, bucket_mb=8, link=cost.Link.gbit(10), workers=8, forward_s=0.04)
    >>> tl.total < tl.serial                     # overlap hides part of the communication
    True
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import cost
from ..checks import check_positive_int
from ..i18n import N_
from ..timing import median


@dataclass
class Profile:
    """A model as the backward pass sees it: per-parameter-tensor element counts and seconds
    of backward compute, in the order backward produces them (last layer first)."""
    params: list[int]
    backward_s: list[float]
    bytes_per_param: int = 4

    def __post_init__(self):
        if len(self.params) != len(self.backward_s) or not self.params:
            raise ValueError(f"need one backward time per tensor (>= 1), got {len(self.params)} and "
                             f"{len(self.backward_s)}")
        if any(p < 1 for p in self.params) or any(not t >= 0 for t in self.backward_s):
            raise ValueError("params must be >= 1 and backward times >= 0")

    @classmethod
    def uniform(cls, layers: int, params_per_layer: int, backward_s: float) -> "Profile":
        """`layers` equal tensors sharing `backward_s` seconds of backward."""
        check_positive_int(layers, "layers"), check_positive_int(params_per_layer, "params_per_layer")
        return cls([params_per_layer] * layers, [backward_s / layers] * layers)

    @property
    def total_params(self) -> int:
        return sum(self.params)


def buckets(profile: Profile, bucket_mb: float) -> list[tuple[int, float]]:
    """Group tensors into buckets in backward order, as DDP does: a bucket closes once it
    holds at least `bucket_mb` MB. Returns (bytes, backward seconds) per bucket."""
    if not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be > 0, got {bucket_mb}")
    cap = bucket_mb * 1024 * 1024
    out, nbytes, secs = [], 0, 0.0
    for p, t in zip(profile.params, profile.backward_s):
        nbytes += p * profile.bytes_per_param
        secs += t
        if nbytes >= cap:
            out.append((nbytes, secs))
            nbytes, secs = 0, 0.0
    if nbytes:
        out.append((nbytes, secs))
    return out


def predict_timeline(profile: Profile, bucket_mb: float, link: cost.Link, workers: int,
                     forward_s: float = 0.0, ratio: float = 1.0, collective: str = "allreduce") -> cost.Timeline:
    """The cost model's Gantt chart of one step: forward, then the buckets' backward, each
    bucket's exchange (bytes / `ratio`) starting when it is ready and the link is free."""
    if not ratio >= 1:
        raise ValueError(f"ratio (compression ratio R) must be >= 1, got {ratio}")
    bs = buckets(profile, bucket_mb)
    comm = [cost.comm_time(b / ratio, workers, link, collective) for b, _names in bs]
    return cost.overlapped_timeline([t for _size, t in bs], comm, forward=forward_s)


def bucket_sweep(profile: Profile, link: cost.Link, workers: int, forward_s: float = 0.0,
                 sizes_mb=(0.25, 0.5, 1, 2, 4, 8, 16, 25, 50, 100, 200, 400)) -> list[dict]:
    """Predicted step time for each bucket size: too small pays the per-message latency many
    times, too large leaves nothing to overlap."""
    rows = []
    for mb in sizes_mb:
        tl = predict_timeline(profile, mb, link, workers, forward_s)
        rows.append({"bucket MB": mb, "buckets": len(tl.comm), "step s": tl.total,
                     "exposed comm s": tl.exposed_comm, "serial s": tl.serial})
    return rows


def median_step(steps: list[dict], skip: int = 1) -> dict:
    """The step (as the overlap probe records it) with the median duration, after `skip`
    warm-up steps."""
    rest = steps[skip:] or steps
    if not rest:
        raise ValueError("no measured steps")
    return median(rest, key=lambda s: s["end"] - s["forward"][0])


def measured_timeline(step: dict) -> cost.Timeline:
    """A Timeline from one measured step: forward start/end, and per bucket when its gradient
    was ready and when its exchange ended. The link serves buckets in order, so an exchange
    starts at max(ready, end of the previous one)."""
    t0 = step["forward"][0]
    fwd = (0.0, step["forward"][1] - t0)
    back, comm, prev, link_free = [], [], fwd[1], 0.0
    for ready, done in step["buckets"]:
        r, d = ready - t0, done - t0
        back.append((prev, r))
        start = max(r, link_free)
        comm.append((start, d))
        prev, link_free = r, d
    serial = fwd[1] + sum(e - s for s, e in back) + sum(e - s for s, e in comm)
    return cost.Timeline(fwd, back, comm, step["end"] - t0, serial=serial)


def predict_from_probe(step: dict, link: cost.Link, workers: int, merge: bool = False,
                       ratio: float = 1.0) -> cost.Timeline:
    """The cost model's timeline for a measured compute-only step: its forward time and each
    bucket's backward time, with each bucket's all-reduce priced on `link` (bytes / `ratio`).
    `merge=True` predicts the same model sent as one bucket (no overlap)."""
    t0, t1 = step["forward"]
    readies = [r for r, _size in step["buckets"]]
    back = [b - a for a, b in zip([t1] + readies[:-1], readies)]
    sizes = list(step["bytes"])
    if merge:
        back, sizes = [sum(back)], [sum(sizes)]
    comm = [cost.ring_allreduce_time(b / ratio, workers, link) for b in sizes]
    return cost.overlapped_timeline(back, comm, forward=t1 - t0)


REGIMES = (("real compute", ""), ("emulated compute", ", emulated"))
_WORDS = (N_("real compute"), N_("emulated compute"), N_("one bucket"), N_("4 MB buckets"), N_("regime"),
          N_("setting"), N_("predicted ms"), N_("measured ms"), N_("model error"))   # for the catalog


def step_seconds(steps: list[dict], skip: int = 1) -> list[float]:
    """Each measured step's duration (forward start to backward end), after `skip` warm-up steps."""
    rest = steps[skip:] or steps
    return [s["end"] - s["forward"][0] for s in rest]


def overlap_runs(raw: dict, link: cost.Link) -> dict:
    """The overlap probe's settings as timelines, per regime ("real compute", and "emulated
    compute" where the probe ran the emulated settings): measured and predicted timelines of
    "one bucket" and "4 MB buckets", and the relative noise of each setting's steps."""
    from . import verdicts
    out = {}
    for regime, suffix in REGIMES:
        runs = raw["runs"]
        if "compute only" + suffix not in runs:
            continue
        compute = median_step(runs["compute only" + suffix])
        keys = ("one bucket", "4 MB buckets")
        out[regime] = {
            "measured": {k: measured_timeline(median_step(runs[k + suffix])) for k in keys},
            "predicted": {"one bucket": predict_from_probe(compute, link, raw["workers"], merge=True),
                          "4 MB buckets": predict_from_probe(compute, link, raw["workers"])},
            "noise": {k: verdicts.noise_of(step_seconds(runs[k + suffix]), floor=0.02) for k in keys}}
    return out


def overlap_rows(overlap: dict) -> list[dict]:
    """One row per regime and setting: buckets, predicted and measured step (ms), model error."""
    from ..i18n import _
    rows = []
    for regime, r in overlap.items():
        for k, m in r["measured"].items():
            p = r["predicted"][k]
            rows.append({"regime": _(regime), "setting": _(k), "buckets": len(m.comm), "predicted ms": 1e3 * p.total,
                         "measured ms": 1e3 * m.total, "model error": m.total / p.total - 1})
    return rows


def overlap_verdict(overlap: dict, workers: int, params: float) -> str:
    """Bucketed overlap against one bucket, per regime, measured (faster, slower or no
    measurable difference within the steps' noise) beside the cost model's prediction, and
    why the regimes can disagree on a CPU."""
    from ..i18n import _, count
    from . import verdicts
    said = {}
    text = _("{workers} workers, {params} parameters.").format(workers=workers, params=count(params))
    for regime, r in overlap.items():
        m, p, noise = r["measured"], r["predicted"], max(r["noise"].values())
        said[regime] = verdicts.compare_speed(_("4 MB buckets"), m["4 MB buckets"].total, _("one bucket"),
                                              m["one bucket"].total, noise)
        model = verdicts.speed(p["4 MB buckets"].total, p["one bucket"].total)
        text += " " + _("With {regime}: {said}; the cost model predicted {model}.").format(
            regime=_(regime), said=said[regime], model=model)
    real, emulated = said.get("real compute"), said.get("emulated compute")
    if real is not None and emulated is not None:
        if real.kind != "faster" and emulated.kind == "faster":
            text += " " + _("On this CPU the real backward and gloo's communication thread compete for the same "
                            "cores, so what the link hides the slower backward gives back. With the backward "
                            "emulated by sleeps, the cores are free, as they are on GPUs, where the backward runs on "
                            "the GPU and NCCL moves the bytes: there the overlap the model predicts appears.")
        elif real.kind == "faster" and emulated.kind == "faster":
            text += " " + _("Both regimes show the gain. The emulated one is closer to a GPU's, where the backward "
                            "leaves the CPU's cores to the communication.")
        elif emulated.kind != "faster":
            text += " " + _("Even with the backward emulated the overlap did not show here: this machine is busy "
                            "(other processes, or its two cores shared by both workers); the cost model's timeline "
                            "above shows what the overlap does when the link and the compute do not interfere.")
    return verdicts.tidy(text)
