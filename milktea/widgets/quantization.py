"""The quantization chapter's view: values snapping to the grid as the bits change."""
from __future__ import annotations

import torch

from ..experiments import quantization as exp
from ..plots import quantization as plots
from ..i18n import N_, _
from .panel import new_figure, show_figure

# (label, entries per scale); 0 stands for one scale for the whole tensor
CHUNKS = [(N_("whole tensor"), 0), ("4096", 4096), ("1024", 1024), ("256", 256), ("64", 64)]


def snapping(x: torch.Tensor | None = None, bits: int = 4, chunk: int | None = 1024, show: int = 40):
    """Sliders for bits per entry and chunk size (+ stochastic rounding) over a gradient `x`
    (default: a real digits-MLP gradient). The figure shows the first `show` values moving
    to their grid level, and the error histogram of every entry.

    >>> view = snapping()          # doctest: +SKIP
    >>> view                       # doctest: +SKIP
    """
    import ipywidgets as w
    x = exp.digits_gradient() if x is None else x.detach().float().reshape(-1)
    bits_s = w.SelectionSlider(options=list(exp.WIDTHS), value=bits, description=_("bits"),
                               continuous_update=False)
    chunk_s = w.SelectionSlider(options=[(_(label), n) for label, n in CHUNKS], value=chunk or 0,
                               description=_("chunk"),
                                continuous_update=False)
    stoch = w.Checkbox(value=False, description=_("stochastic rounding"))
    out = w.Output()

    def update(_change=None):
        s = exp.snap(x, bits_s.value, chunk_s.value or None, stoch.value)
        fig = new_figure((8, 4.2))
        plots.snap(s, fig=fig, show=show)
        show_figure(out, fig)

    for c in (bits_s, chunk_s, stoch):
        c.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([bits_s, chunk_s, stoch]), out])
    box.update = update          # for tests and for redrawing by hand
    return box
