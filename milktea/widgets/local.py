"""Chapter 08's view: how many inner steps H a link needs, priced by milktea.local.cost."""
from __future__ import annotations

import math

import ipywidgets as w

from ..cost import Link
from ..experiments.local import needed_gbit, utilisation_curves
from ..i18n import _
from ..local.cost import local_cost
from ..plots.local import utilisation
from .panel import slider_style, table, view


def _number(x: float) -> str:
    """3 significant digits without an exponent: 0.0123, 4.56, 789, 12,345."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def calculator_view(params: float = 1e9, workers: int = 8, compute_s: float = 0.5, gbit: float = 1.0,
                    latency: float = 50e-6, inner_steps: int = 100, bits: int = 8, target: float = 0.9,
                    link_label: str = "") -> w.VBox:
    """H, the link and the report's bits -> the share of time the workers compute, the bytes
    per outer step and per inner step, and the link that `target` of the time would need.
    `latency` (seconds) and `gbit` can come from a link calibrated on this machine."""
    s = slider_style()
    controls = {
        "inner_steps": w.IntSlider(value=inner_steps, min=1, max=1000, description=_("inner steps H"), **s),
        "gbit": w.FloatLogSlider(value=gbit, base=10, min=-2, max=3, description=_("link (Gbit/s)"),
                                 readout_format=".3g", **s),
        "bits": w.Dropdown(options=[(_("fp32 (32 bits)"), 32), ("int8", 8), (_("4-bit"), 4)], value=bits,
                           description=_("report")),
        "params": w.FloatLogSlider(value=params, base=10, min=6, max=11, description=_("parameters"),
                                   readout_format=".3g", **s),
        "compute_s": w.FloatLogSlider(value=compute_s, base=10, min=-3, max=1, description=_("compute per inner step (s)"),
                                      readout_format=".3g", **s),
    }

    def update(inner_steps, gbit, bits, params, compute_s):
        c = local_cost(params, workers, inner_steps, Link.gbit(gbit, latency), compute_s, bits=bits)
        need = needed_gbit(target, params, workers, compute_s, inner_steps, bits=bits, latency=latency)
        html = table([(_("bytes per outer step, each worker"), _number(c.report_bytes / 1e6) + " MB"),
                      (_("per inner step, amortised"), _number(c.bytes_per_inner_step / 1e6) + " MB"),
                      (_("x fewer bytes than data parallel"), f"{c.ratio:,.0f}"),
                      (_("exchange per outer step"), _number(c.comm_s) + " s"),
                      (_("time spent computing"), f"{c.utilisation:.1%}"),
                      (_("link for {target:.0%} computing").format(target=target),
                       _("out of reach: latency alone") if math.isinf(need) else _number(need) + " Gbit/s")])
        curves = utilisation_curves(params, workers, compute_s, sorted({1, 10, inner_steps, 1000}),
                                    latency=latency, bits=bits)
        return html, lambda fig: utilisation(curves, fig.add_subplot(), gbit, link_label)

    return view(controls, update, figsize=(7.5, 3.2),
                title=_("Inner steps against the link: {workers} workers").format(workers=workers),
                margins=dict(left=0.1, right=0.98, bottom=0.16, top=0.95))
