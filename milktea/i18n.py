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
translation is shown in English, never dropped. Library code writes
``_("kept {k} of {n}").format(k=k, n=n)``, never an f-string inside ``_()``: the catalog's
key is the text before formatting. ``N_()`` only marks a string for the catalog (a table
column name, say) that is translated later, where it is shown.

The catalog is ``milktea/locale/zh_CN/LC_MESSAGES/milktea.po``, kept with Babel::

    make i18n    # pybabel extract + update + compile (the .mo is committed beside the .po)

Chinese also needs a font with CJK glyphs in figures: ``use("zh")`` adds the one milktea
ships (``milktea.fonts``, then any the system has) after matplotlib's usual families, so
Latin text and math keep their usual look and Chinese characters come from the CJK font.
Counts read as a Chinese book writes them (``count``: 2500 万, 15 亿).
"""

from __future__ import annotations

import contextlib
import gettext
import math
import os
import threading
import warnings
from pathlib import Path

LANGUAGES = ("en", "zh")
_LOCALE_DIR = Path(__file__).with_name("locale")
_GETTEXT_NAMES = {"zh": "zh_CN"}

_current = "en"
_catalog: gettext.NullTranslations = gettext.NullTranslations()
_saved_family = None  # matplotlib's font.family before use("zh") added the CJK fallback
_local = threading.local()  # speaking(): a language for one thread, for a while


def use(lang: str) -> None:
    """Make the library speak ``lang`` ("en" or "zh") from now on, in this process."""
    global _current, _catalog
    key = _key(lang)
    _current, _catalog = key, _load(key)
    _set_figure_font(key)


def _key(lang) -> str:
    if not isinstance(lang, str):
        raise TypeError(f"language must be a string such as 'en' or 'zh', not {type(lang).__name__}")
    key = lang.strip().lower().replace("_", "-")
    key = {"zh-cn": "zh", "zh-hans": "zh", "cn": "zh", "english": "en"}.get(key, key)
    if key not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; choose one of {', '.join(LANGUAGES)}")
    return key


def _load(key: str) -> gettext.NullTranslations:
    if key == "en":
        return gettext.NullTranslations()
    return gettext.translation("milktea", localedir=_LOCALE_DIR, languages=[_GETTEXT_NAMES[key]], fallback=True)


@contextlib.contextmanager
def speaking(lang: str):
    """Speak `lang` inside the block, in this thread only (the grader writes each learner's
    feedback in the language of that learner's notebook)::

        >>> with speaking("zh"):
        ...     print(_("parameter server"))
        参数服务器
        >>> print(_("parameter server"))
        parameter server
    """
    before = getattr(_local, "override", None)
    _local.override = (_key(lang), _load(_key(lang)))
    try:
        yield
    finally:
        _local.override = before


def cjk_font() -> str | None:
    """The first font Chinese figure text will use: the one milktea ships (milktea.fonts),
    else a system CJK font, else None."""
    from milktea import fonts
    names = fonts.figure_fonts()
    return names[0] if names else None


def _set_figure_font(key: str) -> None:
    """zh: put the CJK fonts after matplotlib's usual families (glyph fallback); en: undo."""
    global _saved_family
    if key == "en" and _saved_family is None:
        return  # nothing to undo; don't import matplotlib for nothing
    import matplotlib  # a dependency of milktea; cheap when already imported

    if key == "en":
        if _saved_family is not None:
            matplotlib.rcParams["font.family"] = _saved_family
            _saved_family = None
        return
    from milktea import fonts
    names = fonts.figure_fonts()
    if not names:
        warnings.warn(_(FONT_HINT), stacklevel=3)
        return
    family = list(_saved_family if _saved_family is not None else matplotlib.rcParams["font.family"])
    if _saved_family is None:
        _saved_family = family
    matplotlib.rcParams["font.family"] = [f for f in family if f not in names] + names


def language() -> str:
    """The language the library speaks now: "en" or "zh"."""
    override = getattr(_local, "override", None)
    return override[0] if override else _current


def _(message: str) -> str:
    """``message`` in the current language (English when no translation exists)."""
    if not message:
        return message  # gettext would answer "" with the catalog's header
    override = getattr(_local, "override", None)
    return (override[1] if override else _catalog).gettext(message)


def count(n, digits: int = 3) -> str:
    """A large count as the current language writes it: 25.3M / 1.5B in English, 2528 万 /
    15 亿 in Chinese (below ten thousand: the plain number, no separators in Chinese).

        >>> count(25_280_000), count(1.5e9), count(175e9), count(4096)
        ('25.3M', '1.5B', '175B', '4,096')
        >>> with speaking("zh"):
        ...     print(count(25_280_000), count(1.5e9), count(175e9), count(6.5e6), count(4096))
        2528 万 15 亿 1750 亿 650 万 4096
    """
    n = float(n)
    zh = language() == "zh"
    if not math.isfinite(n) or abs(n) >= 1e15:  # beyond any count a book writes out
        return power_of_ten(n, digits) if zh else f"{n:.{digits}g}"
    for size, name in (((1e8, " 亿"), (1e4, " 万")) if zh else ((1e9, "B"), (1e6, "M"))):
        if abs(n) >= size:
            x = n / size
            return (f"{x:.0f}" if abs(x) >= 100 or x == round(x) else f"{x:.{digits}g}") + name
    if n != int(n):
        return f"{n:.{digits}g}"
    return f"{int(n)}" if zh else f"{int(n):,}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(n: float, digits: int = 3) -> str:
    """A number too large (or small) to write out, as a book prints it: 7.74×10²⁹.

        >>> power_of_ten(7.74e29), power_of_ten(-2e-12, 2), power_of_ten(float("inf"))
        ('7.74×10²⁹', '-2×10⁻¹²', 'inf')
    """
    n = float(n)
    if not math.isfinite(n) or n == 0:
        return f"{n:g}"
    mantissa, exponent = f"{n:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}×10{str(int(exponent)).translate(_SUPERSCRIPT)}"


def N_(message: str) -> str:
    """Mark ``message`` for the catalog without translating it now (see ``_``)."""
    return message


# Shown when no font with Chinese glyphs can be loaded (a broken install: milktea ships one).
FONT_HINT = N_("no font with Chinese glyphs could be loaded, so Chinese text in figures will show "
               "boxes: milktea's own font file is missing or unreadable. Reinstall milktea "
               "(pip install -e .) or install a system font (Debian/Ubuntu: sudo apt-get install "
               "fonts-noto-cjk), then restart the kernel")


use(os.environ.get("MILKTEA_LANG", "en") or "en")
