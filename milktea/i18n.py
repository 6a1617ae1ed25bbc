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

Chinese also needs a font with CJK glyphs in figures: ``use("zh")`` adds the first one it
finds (see ``CJK_FONTS``) to matplotlib's font list as a fallback, so Latin text and math
keep their usual look and Chinese characters come from the CJK font.
"""

from __future__ import annotations

import contextlib
import gettext
import os
import threading
import warnings
from pathlib import Path

LANGUAGES = ("en", "zh")
_LOCALE_DIR = Path(__file__).with_name("locale")
_GETTEXT_NAMES = {"zh": "zh_CN"}

# Families with Simplified Chinese glyphs, best first: Debian/Ubuntu (fonts-noto-cjk,
# fonts-wqy-microhei, which the project's CI installs), then macOS and Windows.
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
             "WenQuanYi Zen Hei", "Noto Sans CJK JP", "PingFang SC", "Hiragino Sans GB",
             "Heiti SC", "Microsoft YaHei", "SimHei")
_CJK_FILES = ("notosanscjk", "notosanssc", "sourcehansans", "wqy-microhei", "wqy-zenhei")
FONT_HINT = ("no font with Chinese glyphs found; figures will show boxes. Install one, e.g. "
             "`apt-get install fonts-wqy-microhei` (Debian/Ubuntu), then restart the kernel")

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
    """The name of a font with Chinese glyphs that matplotlib can use, or None.

    Looks in matplotlib's font list first, then among the system's font files (a font
    installed after matplotlib built its cache is found this way and added)."""
    from matplotlib import font_manager

    def known():
        names = {f.name for f in font_manager.fontManager.ttflist}
        return next((n for n in CJK_FONTS if n in names), None)

    name = known()
    if name is None:
        for path in font_manager.findSystemFonts():
            if any(tag in Path(path).name.lower() for tag in _CJK_FILES):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue  # an unreadable font file: try the next
        name = known()
    return name


def _set_figure_font(key: str) -> None:
    """zh: put a CJK font after matplotlib's usual families (glyph fallback); en: undo."""
    global _saved_family
    if key == "en" and _saved_family is None:
        return  # nothing to undo; don't import matplotlib for nothing
    import matplotlib  # a dependency of milktea; cheap when already imported

    if key == "en":
        if _saved_family is not None:
            matplotlib.rcParams["font.family"] = _saved_family
            _saved_family = None
        return
    name = cjk_font()
    if name is None:
        warnings.warn(FONT_HINT, stacklevel=3)
        return
    family = list(_saved_family if _saved_family is not None else matplotlib.rcParams["font.family"])
    if _saved_family is None:
        _saved_family = family
    matplotlib.rcParams["font.family"] = [f for f in family if f != name] + [name]


def language() -> str:
    """The language the library speaks now: "en" or "zh"."""
    override = getattr(_local, "override", None)
    return override[0] if override else _current


def _(message: str) -> str:
    """``message`` in the current language (English when no translation exists)."""
    override = getattr(_local, "override", None)
    return (override[1] if override else _catalog).gettext(message)


def N_(message: str) -> str:
    """Mark ``message`` for the catalog without translating it now (see ``_``)."""
    return message


use(os.environ.get("MILKTEA_LANG", "en") or "en")
