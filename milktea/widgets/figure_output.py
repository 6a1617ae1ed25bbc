"""Put a figure or HTML into an ipywidgets Output directly, so a view updates the same way
in JupyterLab, in a headless test, and in a callback running outside any cell."""
from __future__ import annotations

import base64
import io


def new_figure(figsize):
    """A matplotlib Figure that pyplot does not track (it never shows up on its own)."""
    from matplotlib.figure import Figure
    return Figure(figsize=figsize)


def png_of(fig, dpi: int = 80) -> str:
    """The figure as a base64 PNG string."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def show_figure(out, fig, text: str = "", dpi: int = 80) -> None:
    """Replace what `out` shows with `fig` (and an optional line of HTML text above it)."""
    items = []
    if text:
        items.append(_html(text))
    items.append({"output_type": "display_data", "metadata": {},
                  "data": {"image/png": png_of(fig, dpi), "text/plain": f"<figure {fig.get_label() or ''}>"}})
    out.outputs = tuple(items)


def show_html(out, html: str) -> None:
    """Replace what `out` shows with an HTML fragment."""
    out.outputs = (_html(html),)


def _html(html: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": html, "text/plain": html}}
