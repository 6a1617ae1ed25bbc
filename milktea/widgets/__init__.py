"""Interactive views for the chapters (ipywidgets). Each is built on library functions
and holds no logic of its own: moving a control calls the library and redraws.

    >>> from milktea.widgets import bottleneck_view
    >>> v = bottleneck_view()          # in a notebook: display(v)
    >>> v.controls["workers"].value = 8
"""
from .bottleneck import bottleneck_view, phone_night_view  # noqa: F401
from .compression import compression_view  # noqa: F401
from .dashboard import Dashboard, decision_guide, reveal  # noqa: F401
from .engineering import overlap_explorer  # noqa: F401
from .ledger import ledger_view  # noqa: F401
from .quantization import snapping  # noqa: F401
from .topk import topk_view_widget  # noqa: F401
