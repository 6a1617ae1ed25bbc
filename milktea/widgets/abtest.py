"""The A/B test's view (chapter 06b): the measured run re-priced on another link, with the
codecs as this machine timed them or as a GPU would run them (an assumed memory bandwidth),
and each scheme's time to the target loss at that link."""
from __future__ import annotations

import html
import math

from ..experiments import dashboard as exp
from ..i18n import _
from ..plots import dashboard as plots
from ..tables import word
from .panel import new_figure, show_figure


def reprice_view(comparison, tt: dict | None = None, gbit: float = 1.0, mem_gbps: float = 2000.0):
    """A link slider and a codec switch over a measured `compare` run: each scheme's step time
    if only the link (and, with the GPU switch, the codec) had been different, the step's
    speedups, and which scheme reaches the target loss (`time_to_target`) first there.

    >>> reprice_view(comparison)      # doctest: +SKIP
    """
    import ipywidgets as w
    from ..distributed.reprice import gpu_codecs
    from ..experiments.time_to_target import time_to_target
    tt = time_to_target(comparison) if tt is None else tt
    codecs = {"here": None, "gpu": gpu_codecs(comparison, mem_gbps)}
    bw = w.FloatLogSlider(value=gbit, base=10, min=-1, max=2.6, step=0.05, description="Gbit/s",
                          continuous_update=False)
    src = w.Dropdown(options=[(_("codecs as timed on this machine"), "here"),
                              (_("codecs of a GPU at {gbps:g} GB/s (assumed)").format(gbps=mem_gbps), "gpu")],
                     value="here", description=_("codecs"), style={"description_width": "initial"})
    out = w.Output()

    def update(_change=None):
        rows = exp.repriced(comparison, bw.value, codec=codecs[src.value], tt=tt)
        fig = new_figure((8, 0.38 * len(rows) + 1.2))
        plots.repriced(rows, bw.value, ax=fig.subplots())
        fig.subplots_adjust(left=0.3, right=0.92, bottom=0.25, top=0.85)
        reached = [r for r in rows if not math.isnan(r.get("time to target s", math.nan))]
        if reached:
            best = min(reached, key=lambda r: r["time to target s"])
            text = _("At {gbit:.3g} Gbit/s the first to the target loss would be <b>{name}</b>, in {t:.2f} s "
                     "({n} of {total} schemes reached it in the run).").format(
                gbit=bw.value, name=html.escape(word(best["scheme"])), t=best["time to target s"], n=len(reached),
                total=len(rows))
        else:
            text = _("No scheme reached the target loss in the run.")
        show_figure(out, fig, text)

    for c in (bw, src):
        c.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([bw, src]), out])
    box.update = update
    return box
