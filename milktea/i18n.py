"""One language switch for everything the library prints, plots and shows.

The course comes in two editions, English (``notebooks/``) and Chinese (``notebooks/zh/``).
Their code cells are the same; the first one says which language the library should speak::

    >>> from milktea import i18n
    >>> i18n.use("en")
    >>> i18n.language()
    'en'
    >>> i18n._("compression ratio")
    'compression ratio'

The default comes from the ``MILKTEA_LANG`` environment variable (``en`` when unset).
Messages are looked up in gettext catalogs under ``milktea/locale``; a message with no
translation is shown in English, never dropped.
"""

from __future__ import annotations

import gettext
import os
from pathlib import Path

LANGUAGES = ("en", "zh")
_LOCALE_DIR = Path(__file__).with_name("locale")
_GETTEXT_NAMES = {"zh": "zh_CN"}

_current = "en"
_catalog: gettext.NullTranslations = gettext.NullTranslations()


def use(lang: str) -> None:
    """Make the library speak ``lang`` ("en" or "zh") from now on, in this process."""
    global _current, _catalog
    if not isinstance(lang, str):
        raise TypeError(f"language must be a string such as 'en' or 'zh', not {type(lang).__name__}")
    key = lang.strip().lower().replace("_", "-")
    key = {"zh-cn": "zh", "zh-hans": "zh", "cn": "zh", "english": "en"}.get(key, key)
    if key not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; choose one of {', '.join(LANGUAGES)}")
    _current = key
    if key == "en":
        _catalog = gettext.NullTranslations()
    else:
        _catalog = gettext.translation(
            "milktea", localedir=_LOCALE_DIR, languages=[_GETTEXT_NAMES[key]], fallback=True
        )


def language() -> str:
    """The language the library speaks now: "en" or "zh"."""
    return _current


def _(message: str) -> str:
    """``message`` in the current language (English when no translation exists)."""
    return _catalog.gettext(message)


use(os.environ.get("MILKTEA_LANG", "en") or "en")
