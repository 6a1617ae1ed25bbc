"""The Chinese font milktea ships (milktea/fonts): it covers every character the Chinese text
uses, it is what figures use in Chinese, and on a machine with no CJK font at all (only the
fonts matplotlib itself ships) one figure per chapter draws every glyph."""
import importlib.util
import logging
import sys
import warnings
from pathlib import Path

import matplotlib
import pytest
import torch

from milktea import fonts, i18n

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cjk_font", ROOT / "tools" / "cjk_font.py")
cjk_font = importlib.util.module_from_spec(_spec)
sys.modules["cjk_font"] = cjk_font
_spec.loader.exec_module(cjk_font)


def _dejavu() -> frozenset[int]:
    """What matplotlib's own font draws (Latin, Greek, super- and subscripts, math signs)."""
    from matplotlib.ft2font import FT2Font
    return frozenset(FT2Font(str(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf")).get_charmap())


def test_font_covers_every_character_of_the_chinese_text():
    texts = cjk_font.course_texts()
    assert any(k.startswith("notebooks/zh/") for k in texts) and any(k.endswith(".po") for k in texts)
    assert "docs/glossary.zh.md" in texts
    latin = _dejavu()
    gaps = {name: "".join(c for c in fonts.missing("".join(sorted(cjk_font.characters([text]))))
                          if ord(c) not in latin) for name, text in texts.items()}
    gaps = {name: chars for name, chars in gaps.items() if chars}
    assert not gaps, ("the shipped font lacks characters the Chinese text uses; rebuild it with "
                      "`python tools/cjk_font.py` and commit milktea/fonts/:\n  "
                      + "\n  ".join(f"{name}: {chars}" for name, chars in gaps.items()))


def test_font_is_small_renamed_and_licensed():
    from matplotlib.ft2font import FT2Font
    for path, style in ((fonts.PATH, "Regular"), (fonts.BOLD, "Bold")):
        size = path.stat().st_size
        assert size < 320 * 1024, f"{path.name} is {size / 1024:.0f} KiB: subset it (tools/cjk_font.py)"
        face = FT2Font(str(path))
        assert (face.family_name, face.style_name) == (fonts.FAMILY, style) and fonts.FAMILY == "Milktea Sans SC"
    bold = frozenset(FT2Font(str(fonts.BOLD)).get_charmap())
    assert fonts._charmap() <= bold, "the bold face lacks characters the regular one has: rebuild both"
    licence = (fonts.PATH.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Noto Sans CJK SC" in licence
    assert fonts.missing("梯度稀疏化，误差反馈。") == "" and fonts.missing("\ue000") == "\ue000"


def test_the_font_ships_in_the_package():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    from fnmatch import fnmatch
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["milktea"]
    for path in (fonts.PATH, fonts.BOLD, fonts.PATH.parent / "OFL.txt"):
        rel = path.relative_to(ROOT / "milktea").as_posix()
        assert any(fnmatch(rel, pat) for pat in data), f"pyproject.toml package-data must include {rel}"


def test_lab_css_serves_the_shipped_font(tmp_path):
    css = fonts.write_lab_custom(tmp_path / "custom")
    text = css.read_text()
    assert f'font-family: "{fonts.FAMILY}"' in text and f'url("{fonts.PATH.name}")' in text
    assert (css.parent / fonts.PATH.name).read_bytes() == fonts.PATH.read_bytes()
    assert f'url("{fonts.BOLD.name}")' in text and "font-weight: bold" in text
    assert (css.parent / fonts.BOLD.name).read_bytes() == fonts.BOLD.read_bytes()
    for var in ("--jp-ui-font-family", "--jp-content-font-family", "--jp-code-font-family"):
        assert var in text and text.index(fonts.FAMILY, text.index(var)) < text.index(";", text.index(var))


# ---------------------------------------------------------------- a machine without CJK fonts

@pytest.fixture
def bare_machine(monkeypatch):
    """matplotlib as on a fresh machine: only the fonts matplotlib ships, no system font."""
    from matplotlib import font_manager as fm
    own = Path(matplotlib.get_data_path())
    monkeypatch.setattr(fm.fontManager, "ttflist",
                        [f for f in fm.fontManager.ttflist if Path(f.fname).is_relative_to(own)])
    monkeypatch.setattr(fm, "findSystemFonts", lambda *a, **k: [])
    monkeypatch.setattr(fonts, "_registered", None)
    before = i18n.language()
    i18n.use("en")  # drop whatever fallback this process had
    fm.fontManager._findfont_cached.cache_clear()
    yield
    i18n.use("en")
    monkeypatch.undo()
    fm.fontManager._findfont_cached.cache_clear()
    i18n.use(before)


class _Complaints(logging.Handler):
    def __init__(self):
        super().__init__()
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


def _glyph_complaints(draw) -> list[str]:
    """Run draw(fig) on a fresh Agg figure and render it; matplotlib's missing-glyph messages."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    catch = _Complaints()
    log = logging.getLogger("matplotlib")
    log.addHandler(catch)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig = Figure(figsize=(8, 4))
            FigureCanvasAgg(fig)
            draw(fig)
            fig.canvas.draw()
    finally:
        log.removeHandler(catch)
    return [m for m in [str(w.message) for w in caught] + catch.seen if "glyph" in m.lower()]


def _ch00(fig):
    from milktea.plots.training import curve
    from milktea.simulate import simulate
    from milktea.tasks import Quadratic
    curve(simulate(Quadratic(), workers=2, steps=3, lr=0.1, progress=False), ax=fig.subplots())


def _ch01(fig):
    from milktea.experiments.bottleneck import scissors
    from milktea.plots.bottleneck import scissors as scissors_plot
    scissors_plot(scissors(10), ax=fig.subplots())


def _ch02(fig):
    from milktea.experiments import compression
    from milktea.plots.compression import tradeoff_plot
    x = torch.randn(2000, generator=torch.Generator().manual_seed(0))
    tradeoff_plot(compression.tradeoff(x, ratios=(0.1, 0.01)), ax=fig.subplots())


def _ch03(fig):
    from milktea.experiments.topk import index_cost
    from milktea.plots.topk import index_cost_plot
    x = torch.randn(4000, generator=torch.Generator().manual_seed(0))
    index_cost_plot(index_cost(x, densities=(0.01, 0.1)), ax=fig.subplots())


def _ch04(fig):
    from milktea.experiments.ledger import ledger_trace
    from milktea.plots.ledger import ledger_night
    ledger_night(ledger_trace(), 2, fig.subplots(1, 2))


def _ch05(fig):
    from milktea.experiments.quantization import bit_widths
    from milktea.plots.quantization import bit_widths as plot
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    plot(bit_widths(x), ax=fig.subplots())


def _ch06(fig):
    from milktea import cost
    from milktea.experiments import overlap
    from milktea.plots.engineering import bucket_sweep
    profile = overlap.Profile.uniform(8, 100_000, 0.05)
    bucket_sweep(overlap.bucket_sweep(profile, cost.Link(1e9, 5e-5), 4, sizes_mb=(0.5, 2, 8)), ax=fig.subplots())


def _ch07(fig):
    from milktea.experiments.dashboard import STAGES
    from milktea.plots.dashboard import pipeline
    pipeline([{"stage": s, "seconds": 0.001 * (i + 1), "bytes": 1e6} for i, s in enumerate(STAGES)],
             ax=fig.subplots(), title=i18n._("one step"))


def _catalog(fig):
    """Every Chinese string of the catalog, drawn (the figures' words all come from it)."""
    texts = [t for _w, t in cjk_font.course_texts().items() if _w.endswith(".po")]
    lines = sorted(set("".join(texts)) - set(" \n"))
    fig.text(0, 0.5, "".join(lines), fontsize=4, wrap=True)


CHAPTERS = {"00": _ch00, "01": _ch01, "02": _ch02, "03": _ch03, "04": _ch04, "05": _ch05, "06": _ch06,
            "07": _ch07, "catalog": _catalog}


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_chinese_figures_draw_every_glyph_without_a_system_font(bare_machine, chapter):
    i18n.use("zh")
    assert i18n.cjk_font() == fonts.FAMILY
    assert matplotlib.rcParams["font.family"][-1] == fonts.FAMILY  # after the usual families
    complaints = _glyph_complaints(CHAPTERS[chapter])
    assert not complaints, "\n".join(complaints[:10])


def test_without_the_font_chinese_boxes_are_reported_in_chinese(bare_machine, monkeypatch):
    """The check above means something: with the shipped font gone too, the same figure
    misses its glyphs, and use("zh") says so in Chinese, saying what to do."""
    monkeypatch.setattr(fonts, "PATH", fonts.PATH.with_name("absent.otf"))
    with pytest.warns(UserWarning) as caught:
        i18n.use("zh")
    message = str(caught[0].message)
    assert "字体" in message and "pip install -e ." in message
    assert i18n.cjk_font() is None
    assert _glyph_complaints(_ch07)


def _weight_complaints(draw) -> list[str]:
    """matplotlib's "findfont: Failed to find font weight ..." messages while drawing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    catch = _Complaints()
    log = logging.getLogger("matplotlib")
    log.addHandler(catch)
    try:
        fig = Figure(figsize=(8, 4))
        FigureCanvasAgg(fig)
        draw(fig)
        fig.canvas.draw()
    finally:
        log.removeHandler(catch)
    return [m for m in catch.seen if "Failed to find font weight" in m]


def test_bold_chinese_text_uses_the_bold_face(bare_machine):
    """Chapter 07's pipeline labels its boxes in bold: the bold face is found, and matplotlib
    says nothing about falling back to the regular one."""
    from matplotlib.font_manager import FontProperties, findfont
    i18n.use("zh")
    assert Path(findfont(FontProperties(family=fonts.FAMILY, weight="bold"))).name == fonts.BOLD.name
    assert Path(findfont(FontProperties(family=fonts.FAMILY))).name == fonts.PATH.name
    assert _weight_complaints(_ch07) == []


def test_without_the_bold_face_matplotlib_complains(bare_machine, monkeypatch):
    """The check above means something: with only the regular face, the same figure logs the fallback."""
    monkeypatch.setattr(fonts, "BOLD", fonts.PATH.with_name("absent-bold.otf"))
    i18n.use("zh")
    assert _weight_complaints(_ch07)


def test_a_system_font_without_bold_stays_quiet():
    """A system CJK font after ours (WenQuanYi has one weight) is a glyph fallback: its weight
    fallback is not news for a reader, ours would be."""
    import logging as lg
    quiet = lg.LogRecord("matplotlib.font_manager", lg.WARNING, "", 0,
                         "findfont: Failed to find font weight bold for WenQuanYi Micro Hei, now using 400.", (), None)
    loud = lg.LogRecord("matplotlib.font_manager", lg.WARNING, "", 0,
                        "findfont: Failed to find font weight bold for Milktea Sans SC, now using 400.", (), None)
    assert not fonts._system_weight_fallback(quiet) and fonts._system_weight_fallback(loud)
