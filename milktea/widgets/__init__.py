"""Interactive views for the chapters (ipywidgets). Each is built on library functions
and holds no logic of its own: moving a control calls the library and redraws.
"""
from .dashboard import Dashboard, decision_guide, reveal  # noqa: F401
from .engineering import overlap_explorer  # noqa: F401
from .quantization import snapping  # noqa: F401
