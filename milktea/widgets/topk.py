"""View for chapter 03: Top-K on a real layer's gradient as K changes."""
from __future__ import annotations

import ipywidgets as w
import torch

from ..experiments.gradients import layer_gradients
from ..experiments.topk import topk_view
from ..plots.topk import layer_kept
from ..i18n import _
from .panel import slider_style, table, view


def topk_view_widget(layer: torch.Tensor | None = None, k: int = 80) -> w.VBox:
    """Slide K and see which entries of a weight gradient Top-K keeps, the threshold,
    the share of ||g||^2 they carry and the real packet (milktea.experiments.topk).
    `layer` defaults to the first layer of the digits MLP (128 hidden units x 64 pixels)."""
    g = layer_gradients()["0.weight"] if layer is None else layer
    if g.dim() != 2:
        raise ValueError(f"layer must be a 2-D weight gradient, got shape {tuple(g.shape)}")
    n = g.numel()
    s = slider_style()
    controls = {"k": w.IntSlider(value=min(k, n), min=1, max=min(n, 2000), description=_("K (entries kept)"), **s)}
    grid = g.detach().abs().cpu().numpy()

    def update(k):
        v = topk_view(g, k)
        html = table([("K / N", f"{k} / {n} = {k / n:.2%}"), (_("threshold |g|"), f"{v.threshold:.3g}"),
                      (_("share of ||g||^2 kept"), f"{v.energy:.1%}"),
                      (_("packet"), _("{nbytes:,} B ({encoding} index), R = {ratio:.1f}x").format(
                          nbytes=v.packet_bytes, encoding=v.encoding, ratio=v.ratio))])
        return html, lambda fig: layer_kept(grid, v, fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]}))

    return view(controls, update, figsize=(10, 3.6), title=_("Top-K on the first layer's gradient"),
                margins=dict(left=0.07, right=0.98, bottom=0.15, top=0.91, wspace=0.2))
