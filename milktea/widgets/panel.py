"""The plumbing every view shares: controls, a readout and a figure, redrawn through
library functions whenever a control moves.

A view is an ipywidgets VBox with three extra attributes, so tests (and curious readers)
can drive it without a browser:  `view.controls` (name -> control), `view.readout` (the
HTML numbers) and `view.image` (the figure as PNG bytes); `view.refresh()` redraws.
"""
from __future__ import annotations

import io
from typing import Callable

import ipywidgets as w
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def render(draw: Callable[[Figure], None], figsize=(7, 3), dpi: int = 80, margins: dict | None = None) -> bytes:
    """Draw with `draw(fig)` on a fresh off-screen figure and return it as PNG bytes.
    (No pyplot: nothing is shown twice and nothing leaks between redraws.) `margins`
    (subplots_adjust arguments) skip tight_layout, which draws the figure twice."""
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    draw(fig)
    if margins:
        fig.subplots_adjust(**margins)
    else:
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def table(rows: list[tuple[str, str]]) -> str:
    """A small two-column HTML table of (label, value) pairs."""
    cells = "".join(f"<tr><td style='padding:1px 10px 1px 0'>{k}</td><td><b>{v}</b></td></tr>" for k, v in rows)
    return f"<table style='font-size:13px'>{cells}</table>"


def view(controls: dict[str, w.Widget], update: Callable[..., tuple[str, Callable[[Figure], None]]],
         figsize=(7, 3), title: str = "", margins: dict | None = None) -> w.VBox:
    """A VBox of `controls`, an HTML readout and a figure. `update(**values)` gets every
    control's value by name and returns (readout HTML, draw function)."""
    readout = w.HTML()
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))
    error = w.HTML()

    def refresh(_change=None):
        try:
            html, draw = update(**{k: c.value for k, c in controls.items()})
            readout.value = html
            image.value = render(draw, figsize, margins=margins)
            error.value = ""
        except (ValueError, TypeError) as e:   # a setting the library refuses: say why, keep the view
            error.value = f"<span style='color:#b00'>{type(e).__name__}: {e}</span>"

    for c in controls.values():
        c.observe(refresh, names="value")
    head = [w.HTML(f"<b>{title}</b>")] if title else []
    box = w.VBox(head + [w.HBox([w.VBox(list(controls.values())), readout]), error, image])
    box.controls, box.readout, box.image, box.refresh = controls, readout, image, refresh
    refresh()
    return box


def slider_style() -> dict:
    """Room for long slider labels."""
    return dict(style={"description_width": "initial"}, layout=w.Layout(width="420px"),
                continuous_update=False)
