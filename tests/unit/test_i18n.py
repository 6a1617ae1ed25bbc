"""The library speaks Chinese: the zh_CN catalog is complete, compiled, shipped, and used;
Chinese figure text has a font (no box characters)."""
import ast
import gettext
import logging
import string
import warnings
from pathlib import Path

import pytest

from milktea import i18n

ROOT = Path(__file__).resolve().parents[2]
LOCALE = ROOT / "milktea" / "locale"
PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "milktea.po"
MO = PO.with_suffix(".mo")
FIX = "run: make i18n (then translate the new entries in the .po and run it again)"


@pytest.fixture
def zh():
    before = i18n.language()
    i18n.use("zh")
    yield
    i18n.use(before)


def _po():
    from babel.messages.pofile import read_po
    with open(PO, "rb") as f:
        return read_po(f)


def _messages_in_code() -> dict[str, str]:
    """Every _("...") and N_("...") message in milktea/, with where it is."""
    from babel.messages.extract import extract_from_dir
    found = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
            str(ROOT / "milktea"), keywords={"_": None, "N_": None}):
        found.setdefault(message, f"milktea/{filename}:{lineno}")
    return found


def _fields(text: str) -> list[str]:
    return sorted(f"{name}:{spec}" for _, name, spec, _ in string.Formatter().parse(text) if name is not None)


def test_every_message_in_the_code_has_a_chinese_translation():
    po = _po()
    code = _messages_in_code()
    assert code, "no _() messages found in milktea/"
    missing = [f"{where}: {msg!r}" for msg, where in code.items()
               if msg not in po or not po[msg].string or po[msg].fuzzy]
    assert not missing, f"{len(missing)} messages without a Chinese translation; {FIX}\n  " + "\n  ".join(missing)


def test_translations_keep_every_placeholder():
    bad = [f"{m.id!r} -> {m.string!r}" for m in _po() if m.id and m.string and _fields(m.id) != _fields(m.string)]
    assert not bad, "a translation must keep the same {fields} (with the same format specs):\n  " + "\n  ".join(bad)


def test_babel_finds_no_error_in_the_catalog():
    """What `pybabel compile` checks (e.g. %-placeholders, which English like "1% of" can fake)."""
    errors = [f"{m.id!r}: {'; '.join(map(str, errs))}" for m, errs in _po().check()]
    assert not errors, "\n".join(errors)


def test_compiled_catalog_is_the_po():
    """The .mo that ships is the .po compiled: same entries, same translations."""
    po = {m.id: m.string for m in _po() if m.id and m.string and not m.fuzzy}
    with open(MO, "rb") as f:
        mo = gettext.GNUTranslations(f)
    shipped = {k: v for k, v in mo._catalog.items() if k}  # "" is the header
    assert shipped == po, f"milktea.mo is out of date with milktea.po; {FIX}"


def test_no_formatted_string_inside_underscore():
    """_() takes the text before .format(): a literal, or a name holding one marked with N_()."""
    bad = []
    for path in sorted((ROOT / "milktea").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "N_"):
                arg = node.args[0] if len(node.args) == 1 else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                ok = literal or (node.func.id == "_" and isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)))
                if not ok and path.name != "i18n.py":
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "_() needs a plain string literal (use _('... {n} ...').format(n=...)):\n  " + "\n  ".join(bad)


def test_no_module_rebinds_underscore():
    """A module that imports _ from milktea.i18n never binds the name _ itself (`_, ax = ...`,
    `def update(_=None)`, `for _ in ...`): inside that scope _("...") would call the wrong thing."""
    bad = []
    for path in sorted((ROOT / "milktea").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = any(isinstance(n, ast.ImportFrom) and (n.module or "").endswith("i18n")
                      and any(a.name == "_" for a in n.names) for n in ast.walk(tree))
        if not imports:
            continue
        for node in ast.walk(tree):
            bound = (isinstance(node, ast.Name) and node.id == "_" and isinstance(node.ctx, ast.Store)) or \
                    (isinstance(node, ast.arg) and node.arg == "_")
            if bound:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "these bind the name _ (the translation function there); rename them:\n  " + "\n  ".join(bad)


def test_the_catalog_ships_in_the_package():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    from fnmatch import fnmatch
    rel = MO.relative_to(ROOT / "milktea").as_posix()
    assert any(fnmatch(rel, pat) for pat in data.get("milktea", [])), \
        f"pyproject.toml: [tool.setuptools.package-data] milktea must include {rel}"


def test_switching_language(zh):
    assert i18n.language() == "zh"
    assert i18n._("parameter server") == "参数服务器"
    assert i18n._("a message nobody translated") == "a message nobody translated"
    text = i18n._("{wire:,} of {dense:,}").format(wire=1234, dense=56789)
    assert text == "1,234 / 56,789"
    i18n.use("en")
    assert i18n._("parameter server") == "parameter server"
    with pytest.raises(ValueError, match="choose one of"):
        i18n.use("fr")
    with pytest.raises(TypeError):
        i18n.use(None)


def test_widget_speaks_chinese(zh):
    from milktea.widgets.bottleneck import phone_night_view
    v = phone_night_view()
    assert v.controls["branches"].description == "分店数"
    assert "所有分店都打给总部" in v.readout.value
    i18n.use("en")
    assert "everyone phones head office" in phone_night_view().readout.value


# ---------------------------------------------------------------- the CJK font

def _draw_chinese_title():
    """Draw a figure with Chinese text; return the missing-glyph complaints matplotlib made."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    class Catch(logging.Handler):
        def __init__(self):
            super().__init__()
            self.seen = []

        def emit(self, record):
            self.seen.append(record.getMessage())

    catch = Catch()
    log = logging.getLogger("matplotlib")
    log.addHandler(catch)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig = Figure(figsize=(4, 3))
            FigureCanvasAgg(fig)
            ax = fig.subplots()
            ax.plot([1, 2, 3], label="误差反馈")
            ax.set_title("梯度稀疏化：Top-K 与旧账本")
            ax.set_xlabel("密度 s = K / N")
            ax.legend()
            fig.canvas.draw()
    finally:
        log.removeHandler(catch)
    return [str(w.message) for w in caught] + catch.seen


def test_chinese_figure_text_has_glyphs(zh):
    from milktea import fonts
    assert i18n.cjk_font() == fonts.FAMILY, "the font milktea ships comes first (see tests/unit/test_cjk_font.py)"
    complaints = [m for m in _draw_chinese_title() if "glyph" in m.lower()]
    assert not complaints, "\n".join(complaints)


def test_english_drops_the_cjk_fallback(zh):
    import matplotlib

    from milktea import fonts
    assert set(fonts.figure_fonts()) <= set(matplotlib.rcParams["font.family"])
    i18n.use("en")
    assert not set(fonts.figure_fonts()) & set(matplotlib.rcParams["font.family"])
    complaints = [m for m in _draw_chinese_title() if "glyph" in m.lower()]
    assert complaints, "without the fallback, matplotlib should miss the Chinese glyphs (the test above means something)"


# ---------------------------------------------------------------- make lab-zh

def test_lab_zh_opens_the_chinese_edition_in_chinese():
    """`make lab-zh` opens notebooks/zh/00_welcome.ipynb with a settings override (for that
    command only) that picks JupyterLab's Simplified Chinese language pack, which the course
    extra installs, and serves custom.css with the font milktea ships."""
    import json
    import re
    make = (ROOT / "Makefile").read_text()
    rule = re.search(r"^lab-zh:.*\n((?:\t.*\n)+)", make, re.M)
    assert rule, "Makefile: a lab-zh target"
    cmd = rule.group(1).replace("\\\n", " ")
    assert "milktea.fonts lab-custom $(LAB_ZH)/custom" in cmd and "JUPYTER_CONFIG_DIR=$(LAB_ZH)" in cmd
    assert "--LabApp.custom_css=True" in cmd
    assert "notebooks/zh/00_welcome.ipynb" in cmd
    folder = re.search(r"--LabApp\.app_settings_dir=(\S+)", cmd).group(1)
    overrides = json.loads((ROOT / folder / "overrides.json").read_text())
    assert overrides["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "jupyterlab-language-pack-zh-CN" in pyproject
    from importlib import metadata
    try:
        metadata.distribution("jupyterlab-language-pack-zh-CN")
    except metadata.PackageNotFoundError:
        pytest.skip("the Chinese language pack is not installed: pip install -e '.[course]'")
    import jupyterlab_language_pack_zh_CN as pack
    assert list(Path(pack.__file__).parent.rglob("*.json")), "the language pack ships its translations"
