"""Messages made now and said later, in the language of whoever reads them.

The class grader reads a whole folder of submissions before it knows which learner speaks
which language (a student's language is that of their notebooks). A note about a file is
therefore kept as its catalog message and its values, and put into words only when that
learner's feedback is written (`str(note)` inside `i18n.speaking(lang)`).

    >>> from milktea import i18n
    >>> note = lazy("{n} bytes {hex}", n=3, hex="00 01 02")
    >>> with i18n.speaking("zh"):
    ...     str(note) != ""
    True
    >>> note.key()
    ['{n} bytes {hex}', [['hex', '00 01 02'], ['n', '3']]]
"""
from __future__ import annotations

import json

from ..i18n import _


class Lazy:
    """A catalog message and its values; str() says it in the current language."""

    __slots__ = ("msgid", "params")

    def __init__(self, msgid: str, params: dict):
        self.msgid, self.params = msgid, params

    def __str__(self) -> str:
        return _(self.msgid).format(**{k: str(v) for k, v in self.params.items()})

    def __repr__(self) -> str:
        return f"lazy({self.msgid!r}, ...)"

    def __contains__(self, part: str) -> bool:   # `"words" in note` reads the English text
        return part in self.english()

    def english(self) -> str:
        return self.msgid.format(**{k: (v.english() if isinstance(v, Lazy) else str(v)) for k, v in self.params.items()})

    def key(self) -> list:
        """Plain data that is the same in every language (for content hashes)."""
        return [self.msgid, sorted([k, v.key() if isinstance(v, Lazy) else str(v)] for k, v in self.params.items())]


def lazy(msgid: str, **params) -> Lazy:
    """A message to put into words later (see the module docstring). `make i18n` collects
    the msgid (it is a keyword of the catalog's extraction, like _ and N_)."""
    return Lazy(msgid, params)


def key(message) -> str:
    """Text that is the same in every language, for content hashes: a str whatever the message
    is (a Lazy's catalog entry and values as JSON, a plain text as it is)."""
    return json.dumps(message.key(), ensure_ascii=False) if isinstance(message, Lazy) else str(message)
