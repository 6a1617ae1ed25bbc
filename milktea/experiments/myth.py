"""A misconception's verdict: the claim, the numbers, the sentence built from them, and
whether the numbers bust it (True), bear it out (False) or cannot tell here (None).

    >>> Verdict("x", {"a": 1}, "y", None)._repr_markdown_()
    '**Not decided here.** y'
"""
from __future__ import annotations

from dataclasses import dataclass

from ..i18n import _


@dataclass
class Verdict:
    claim: str
    numbers: dict
    text: str
    busted: bool | None          # None: this run cannot tell

    def _repr_markdown_(self) -> str:
        head = (_("**Not decided here.**") if self.busted is None else
                _("**Busted.**") if self.busted else _("**Holds here.**"))
        return f"{head} {self.text}"

    def __repr__(self) -> str:
        state = "undecided" if self.busted is None else "busted" if self.busted else "holds"
        return f"Verdict({state}: {self.text})"
