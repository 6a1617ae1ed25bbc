"""The plumbing every view shares: figures drawn off-screen (no pyplot) and shown as PNG,
either in a ready-made panel or in an ipywidgets Output that a view redraws itself.

`view(controls, update)` is the ready-made panel: an ipywidgets VBox with three extra
attributes, so tests (and curious readers) can drive it without a browser:
`view.controls` (name -> control), `view.readout` (the HTML numbers) and `view.image` (the
figure as PNG bytes); `view.refresh()` redraws. Views with their own layout (several panels,
a live dashboard) draw on `new_figure()` and put it into an Output with `show_figure`, which
updates the same way in JupyterLab, in a headless test and in a callback outside any cell.
"""
from __future__ import annotations

import base64
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
    return png_bytes(fig, dpi)


def new_figure(figsize) -> Figure:
    """A matplotlib Figure that pyplot does not track (it never shows up on its own)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def show_figure(out, fig: Figure, text: str = "", dpi: int = 80) -> None:
    """Replace what the Output `out` shows with `fig` (and an optional line of HTML above it)."""
    items = [_html(text)] if text else []
    items.append({"output_type": "display_data", "metadata": {},
                  "data": {"image/png": base64.b64encode(png_bytes(fig, dpi)).decode("ascii"),
                           "text/plain": f"<figure {fig.get_label() or ''}>"}})
    out.outputs = tuple(items)


def show_html(out, html: str) -> None:
    """Replace what the Output `out` shows with an HTML fragment."""
    out.outputs = (_html(html),)


def _html(html: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": html, "text/plain": html}}


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
