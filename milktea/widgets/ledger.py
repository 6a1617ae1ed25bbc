"""View for chapter 04: the old ledger, night by night."""
from __future__ import annotations

import ipywidgets as w

from ..experiments.ledger import ledger_trace, shop_adjustments
from ..plots.ledger import ledger_night
from ..i18n import _
from ..tables import listing
from .panel import slider_style, table, view


def ledger_view(nights: int = 12, k: int = 2, item: str = "ice") -> w.VBox:
    """Step through one branch's nights: what was new, what the ledger held, which items
    were read out, and how the small steady `item` piles up until it is read
    (milktea.experiments.ledger.ledger_trace, i.e. milktea.ErrorFeedback)."""
    s = slider_style()
    adjustments = shop_adjustments(nights)
    controls = {"night": w.IntSlider(value=1, min=1, max=nights, description=_("night"), **s),
                "k": w.IntSlider(value=k, min=1, max=len(adjustments[0]) - 1, description=_("items read out (K)"), **s)}

    def update(night, k):
        tr = ledger_trace(adjustments, k=k)
        t = night - 1
        col = tr.items.index(item)
        info = tr.night(t)
        name = _(item)
        html = table([(_("read out tonight"), listing(info["chosen"])),
                      (_("'{item}' in the ledger after tonight").format(item=name), f"{tr.after[t, col]:+.2f}"),
                      (_("'{item}' heard so far, with the ledger").format(item=name), f"{tr.delivered(item)[t]:+.2f}"),
                      (_("'{item}' heard so far, without").format(item=name), f"{tr.delivered(item, False)[t]:+.2f}"),
                      (_("'{item}' in truth").format(item=name), f"{tr.truth(item)[t]:+.2f}")])
        return html, lambda fig: ledger_night(tr, t, fig.subplots(1, 2), item=item)

    return view(controls, update, figsize=(10, 3.6), title=_("The old ledger"),
                margins=dict(left=0.05, right=0.98, bottom=0.14, top=0.91, wspace=0.15))
