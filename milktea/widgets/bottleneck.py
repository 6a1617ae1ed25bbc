"""Views for chapters 00-01: the shop's night on the phone, and one training step's time."""
from __future__ import annotations

import ipywidgets as w

from ..experiments.bottleneck import breakdown, phone_night, seconds
from ..plots.bottleneck import breakdown_bars, phone_night_bars
from ..i18n import _
from .panel import slider_style, table, view


def phone_night_view(branches: int = 64, lines: int = 5000, lines_per_second: float = 0.5) -> w.VBox:
    """The story's night: how long the phoning takes for a number of branches, a report
    length and a reading speed (milktea.experiments.bottleneck.phone_night)."""
    s = slider_style()
    controls = {
        "branches": w.IntSlider(value=branches, min=1, max=128, description=_("branches"), **s),
        "lines": w.IntSlider(value=lines, min=100, max=20000, step=100, description=_("lines per report"), **s),
        "lines_per_second": w.FloatLogSlider(value=lines_per_second, base=10, min=-1, max=2,
                                             description=_("lines read per second"), **s),
    }

    def update(branches, lines, lines_per_second):
        night = phone_night(branches, lines, lines_per_second)
        html = table([(_("one report, read once"), seconds(lines / lines_per_second)),
                      (_("everyone phones head office"), seconds(night.head_office_hours * 3600)),
                      (_("each branch phones its neighbour"), seconds(night.ring_hours * 3600)),
                      (_("the day's work"), seconds(night.work_hours * 3600))])
        return html, lambda fig: phone_night_bars(night, fig.add_subplot())

    return view(controls, update, figsize=(8, 2.6), title=_("The shop's night on the phone"),
                margins=dict(left=0.33, right=0.97, bottom=0.2, top=0.88))


def bottleneck_view(params: float = 1.5e9, workers: int = 64, gbit: float = 25, compute: float = 0.2,
                    bytes_per_param: int = 4) -> w.VBox:
    """Model size, workers, bandwidth and compute time -> where one step's time goes
    (milktea.experiments.bottleneck.breakdown, i.e. milktea.cost)."""
    s = slider_style()
    controls = {
        "params": w.FloatLogSlider(value=params, base=10, min=6, max=12, description=_("parameters"),
                                   readout_format=".3g", **s),
        "workers": w.IntSlider(value=workers, min=2, max=512, description=_("workers N"), **s),
        "gbit": w.FloatLogSlider(value=gbit, base=10, min=0, max=3, description=_("bandwidth (Gbit/s)"), **s),
        "compute": w.FloatLogSlider(value=compute, base=10, min=-2, max=1, description=_("compute per step (s)"), **s),
        "bytes_per_param": w.Dropdown(options=[(_("fp32 (4 bytes)"), 4), (_("fp16 / bf16 (2 bytes)"), 2)],
                                      value=bytes_per_param, description=_("gradient")),
    }

    def update(params, workers, gbit, compute, bytes_per_param):
        b = breakdown(params, workers, gbit, compute, bytes_per_param)
        html = table([(_("gradient"), f"{b.grad_bytes / 1e9:.3g} GB"),
                      (_("ring all-reduce"), seconds(b.comm_ring)),
                      (_("parameter server"), seconds(b.comm_ps)),
                      (_("waiting (ring)"), f"{b.waiting:.1%}")])
        return html, lambda fig: breakdown_bars(b, fig.add_subplot())

    return view(controls, update, figsize=(8, 2.6), title=_("Where one training step's time goes"),
                margins=dict(left=0.18, right=0.98, bottom=0.2, top=0.88))
