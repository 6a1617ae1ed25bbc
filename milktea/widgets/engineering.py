"""The engineering chapter's view: the overlap timeline as bandwidth, buckets and ratio change."""
from __future__ import annotations

from .. import cost
from ..experiments import overlap as exp
from ..plots import engineering as plots
from ..i18n import _
from .panel import new_figure, show_figure

BUCKETS_MB = [0.5, 1, 2, 4, 8, 16, 25, 50, 100, 400]
RATIOS = [1, 2, 4, 8, 32, 100]


def overlap_explorer(profile: exp.Profile | None = None, forward_s: float = 0.05, workers: int = 8,
                     gbit: float = 10.0, bucket_mb: float = 25, latency: float = 50e-6):
    """Sliders for link bandwidth, bucket size and compression ratio over a model `profile`
    (default: 100M parameters in 48 equal tensors, 0.1 s of backward); the cost model's
    Gantt chart of one step, with and without overlap.

    >>> overlap_explorer()      # doctest: +SKIP
    """
    import ipywidgets as w
    profile = profile or exp.Profile.uniform(48, 100_000_000 // 48, 0.1)
    bw = w.FloatLogSlider(value=gbit, base=10, min=-1, max=3, step=0.1, description="Gbit/s",
                          continuous_update=False)
    bucket = w.SelectionSlider(options=BUCKETS_MB, value=bucket_mb, description=_("bucket MB"),
                               continuous_update=False)
    ratio = w.SelectionSlider(options=RATIOS, value=1, description=_("ratio R"), continuous_update=False)
    out = w.Output()

    def update(_change=None):
        link = cost.Link.gbit(bw.value, latency)
        tl = exp.predict_timeline(profile, bucket.value, link, workers, forward_s, ratio=ratio.value)
        fig = new_figure((8, 2.4))
        ax = fig.subplots()
        plots.gantt(ax, tl, _("with overlap"), xmax=tl.serial * 1.02)
        ax.legend(loc="lower right", fontsize="x-small")
        fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.86)
        text = _("{params:.0f}M parameters, {workers} workers, {buckets} buckets: "
                 "<b>{total:.0f} ms</b> per step with overlap, {serial:.0f} ms without; "
                 "{exposed:.0f} ms of communication left exposed").format(
            params=profile.total_params / 1e6, workers=workers, buckets=len(tl.comm), total=tl.total * 1e3,
            serial=tl.serial * 1e3, exposed=tl.exposed_comm * 1e3)
        show_figure(out, fig, text)

    for c in (bw, bucket, ratio):
        c.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([bw, bucket, ratio]), out])
    box.update = update
    return box
