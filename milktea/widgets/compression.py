"""View for chapter 02: keep fewer entries, write each with fewer bits, and watch R and
the error move along the trade-off curves."""
from __future__ import annotations

import ipywidgets as w
import torch

from ..experiments.compression import BITS, build_scheme, measure, received, tradeoff
from ..experiments.gradients import flat_gradient
from ..plots.compression import received_plot, tradeoff_plot
from ..i18n import _
from ..tables import word
from .panel import slider_style, table, view

SHARES = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)


def compression_view(tensor: torch.Tensor | None = None, share: float = 0.1, bits: int = 32) -> w.VBox:
    """Two knobs, the two families: `share` of entries kept (Top-K or Random-K, one of
    SHARES) and `bits` per kept value (one of 32, 16, 8, 4, 2, 1). Every redraw compresses `tensor` (by default the digits MLP's gradient)
    for real and measures the packet (milktea.experiments.compression)."""
    if share not in SHARES or bits not in BITS:
        raise ValueError(f"share must be one of {SHARES} and bits one of {BITS}, got {share!r} and {bits!r}")
    g = flat_gradient() if tensor is None else tensor
    curves = tradeoff(g)
    s = slider_style()
    controls = {
        "share": w.SelectionSlider(options=[(f"{100 * v:g}%", v) for v in SHARES],
                                   value=share, description=_("share of entries kept"), **s),
        "bits": w.SelectionSlider(options=list(BITS), value=bits, description=_("bits per kept value"), **s),
        "sparsifier": w.ToggleButtons(options=[("Top-K", "topk"), ("Random-K", "randomk")], value="topk",
                                      description=_("which entries")),
    }

    def update(share, bits, sparsifier):
        scheme = build_scheme(share, bits, sparsifier)
        m = measure(scheme, g)
        orig, back = received(build_scheme(share, bits, sparsifier), g)
        html = table([(_("scheme"), m.name), (_("wire bytes"), _("{wire:,} of {dense:,}").format(wire=m.wire_bytes, dense=m.dense_bytes)),
                      ("R", word(f"{m.ratio:.1f}x")), (_("relative error"), f"{m.rel_error:.3f}"),
                      (_("cosine with the gradient"), f"{m.cosine:.3f}")])

        def draw(fig):
            a, b = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1]})
            tradeoff_plot(curves, a, highlight=m)
            received_plot(orig, back, b, title=_("every entry, {scheme}").format(scheme=m.name))
        return html, draw

    return view(controls, update, figsize=(11, 3.8), title=_("Compress the report"),
                margins=dict(left=0.06, right=0.98, bottom=0.14, top=0.92, wspace=0.22))
