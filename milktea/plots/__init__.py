"""Matplotlib figures shared by the chapters, one module per topic. Each function draws on
an `ax` you pass (or a new figure) and returns it, so a notebook can place figures side by
side and a widget can redraw into its own figure."""
from . import bottleneck  # noqa: F401
from . import compression  # noqa: F401
from . import dashboard  # noqa: F401
from . import engineering  # noqa: F401
from . import ledger  # noqa: F401
from . import lowrank  # noqa: F401
from . import quantization  # noqa: F401
from . import topk  # noqa: F401
