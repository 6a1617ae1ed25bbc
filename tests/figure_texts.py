"""Run at the start of a test kernel (tests/executed.py): every figure the notebook draws
(the inline backend's, a widget's PNG, a saved file) appends its visible text, one JSON list
per figure, to the file named by $MILKTEA_FIGURE_TEXTS, so that a test can read what a
figure says (titles, axis labels, tick labels, legends, annotations) as it reads printed text.

    figure = Figure(); FigureCanvasAgg(figure); figure.subplots().set_title("梯度")
    figure.savefig(io.BytesIO())     # the file gains the line ["梯度", "0.0", "0.2", ...]
"""
import json
import os

from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.text import Text

_PATH = os.environ.get("MILKTEA_FIGURE_TEXTS")
_print_figure = FigureCanvasBase.print_figure


def texts(figure) -> list[str]:
    """The visible, non-empty text of every Text artist in `figure` (tick labels included once drawn)."""
    return [t.get_text() for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _recording_print_figure(self, *args, **kwargs):
    result = _print_figure(self, *args, **kwargs)   # draws first: tick labels are set
    with open(_PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(texts(self.figure), ensure_ascii=False) + "\n")
    return result


if _PATH:
    FigureCanvasBase.print_figure = _recording_print_figure
