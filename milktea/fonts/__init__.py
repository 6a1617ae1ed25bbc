"""The Chinese font the library ships: figures and JupyterLab show Chinese on any machine.

``MilkteaSansSC-Regular.otf`` and ``MilkteaSansSC-Bold.otf`` are subsets of Noto Sans CJK SC
Regular and Bold (SIL OFL 1.1, see ``OFL.txt`` beside them) holding the characters the
course's Chinese text uses; ``tools/cjk_font.py`` builds both. ``i18n.use("zh")`` puts the
family, and any CJK font the system has, after matplotlib's usual families, so Latin text and
math keep their look and Chinese characters come from a font that has them; bold text finds
its own weight (no "findfont: Failed to find font weight bold" reaches a reader)::

    >>> from milktea import fonts
    >>> fonts.register()
    'Milktea Sans SC'
    >>> fonts.missing("梯度稀疏化")
    ''

``write_lab_custom(folder)`` writes the ``custom.css`` (an ``@font-face`` for the same file)
that ``make lab-zh`` serves, so JupyterLab's pages need no system font either.
"""
from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

FAMILY = "Milktea Sans SC"
PATH = Path(__file__).with_name("MilkteaSansSC-Regular.otf")
BOLD = Path(__file__).with_name("MilkteaSansSC-Bold.otf")

# System families with Simplified Chinese glyphs, best first: Debian/Ubuntu (fonts-noto-cjk,
# fonts-wqy-microhei), then macOS and Windows. Used after the shipped font, for characters
# it lacks (a learner's own labels).
SYSTEM_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
                "WenQuanYi Zen Hei", "Noto Sans CJK JP", "PingFang SC", "Hiragino Sans GB",
                "Heiti SC", "Microsoft YaHei", "SimHei")
_SYSTEM_FILES = ("notosanscjk", "notosanssc", "sourcehansans", "wqy-microhei", "wqy-zenhei")

_registered: str | None = None


def register() -> str | None:
    """Add the shipped font, both weights, to matplotlib's font list (once); its family name,
    or None when the regular file is missing or unreadable (a broken install)."""
    global _registered
    if _registered is None:
        import logging

        from matplotlib import font_manager
        try:
            font_manager.fontManager.addfont(str(PATH))
        except (OSError, RuntimeError, ValueError):
            return None
        try:
            font_manager.fontManager.addfont(str(BOLD))
        except (OSError, RuntimeError, ValueError):
            pass   # bold Chinese text then falls back to the regular glyphs
        logging.getLogger("matplotlib.font_manager").addFilter(_system_weight_fallback)
        _registered = FAMILY
    return _registered


def _system_weight_fallback(record) -> bool:
    """Keep matplotlib's log but for its weight fallbacks in a system CJK font that comes after
    the shipped one (WenQuanYi has no bold: its regular glyphs are the intended fallback there)."""
    message = record.getMessage()
    return not (message.startswith("findfont: Failed to find font weight")
                and any(f" for {name}," in message for name in SYSTEM_FONTS))


def system_font() -> str | None:
    """A CJK family the system has (matplotlib's font list, then the system's font files), or None."""
    from matplotlib import font_manager

    def known():
        names = {f.name for f in font_manager.fontManager.ttflist}
        return next((n for n in SYSTEM_FONTS if n in names), None)

    name = known()
    if name is None:
        for path in font_manager.findSystemFonts():
            if any(tag in Path(path).name.lower() for tag in _SYSTEM_FILES):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue  # an unreadable font file: try the next
        name = known()
    return name


def figure_fonts() -> list[str]:
    """The CJK families Chinese figure text falls back to, in order: the shipped font, then
    the system's (empty when neither exists)."""
    return [name for name in (register(), system_font()) if name is not None]


@lru_cache(maxsize=1)
def _charmap() -> frozenset[int]:
    from matplotlib.ft2font import FT2Font
    return frozenset(FT2Font(str(PATH)).get_charmap())


def missing(text: str) -> str:
    """The distinct characters of `text` the shipped font has no glyph for (beyond ASCII
    controls and whitespace), in order of first appearance."""
    have, out = _charmap(), []
    for ch in text:
        if ord(ch) not in have and not ch.isspace() and ch not in out:
            out.append(ch)
    return "".join(out)


def glyph_count() -> int:
    """How many characters the shipped font covers."""
    return len(_charmap())


# JupyterLab's default families (theme-light/dark), with the shipped font before the generic
# family: a system font that has the glyphs still wins, and a page on a machine with none
# draws Chinese from the shipped file. Set on body: the theme sets :root after this file loads.
_LAB_CSS = """/* milktea: Chinese glyphs for JupyterLab without a system CJK font (make lab-zh). */
@font-face {{
  font-family: "{family}";
  src: url("{file}") format("opentype");
  font-display: swap;
}}
@font-face {{
  font-family: "{family}";
  src: url("{bold}") format("opentype");
  font-weight: bold;
  font-display: swap;
}}
body {{
  --jp-ui-font-family: system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial,
    "{family}", sans-serif, "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol";
  --jp-content-font-family: system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial,
    "{family}", sans-serif, "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol";
  --jp-code-font-family: menlo, consolas, "DejaVu Sans Mono", "{family}", monospace;
}}
"""


def lab_css() -> str:
    """The custom.css that gives JupyterLab the shipped font (served beside the font file)."""
    return _LAB_CSS.format(family=FAMILY, file=PATH.name, bold=BOLD.name)


def write_lab_custom(folder) -> Path:
    """Write `folder`/custom.css and a copy of the font files beside it (JupyterLab serves its
    config folder's custom/ at /custom/ when started with --LabApp.custom_css=True)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for path in (PATH, BOLD):
        shutil.copyfile(path, folder / path.name)
    css = folder / "custom.css"
    css.write_text(lab_css(), encoding="utf-8")
    return css


def main(argv=None) -> int:
    """``python -m milktea.fonts lab-custom FOLDER``: what ``make lab-zh`` runs."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "lab-custom":
        print("usage: python -m milktea.fonts lab-custom FOLDER", file=sys.stderr)
        return 2
    print(write_lab_custom(args[1]))
    return 0
