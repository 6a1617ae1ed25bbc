"""Experiments the chapters run: small functions that compute what a notebook shows.

One module per topic (bottleneck, compression, topk, ledger, ...). Each function returns
plain numbers or small dataclasses; figures live in `milktea.plots`, interactive views in
`milktea.widgets`, both built on these.
"""

import os as _os

SIZES = ("full", "small")


def sized(full, small):
    """The size of an expensive knob (steps, seeds, workers, tokens) for this run of a chapter.

    The course runs at full size. The test suite also runs each chapter a second time, in
    the other language, with ``MILKTEA_SIZE=small``: the same code on less work, so only
    sizes change, never a code path::

        >>> sized(200, 20) in (200, 20)
        True
    """
    size = _os.environ.get("MILKTEA_SIZE", "full").strip().lower() or "full"
    if size not in SIZES:
        raise ValueError(f"MILKTEA_SIZE={size!r}: use 'full' (the course) or 'small' (a quick test run)")
    return full if size == "full" else small
