"""The widget tour (tests/fixtures/widget_tour.ipynb, and its Chinese twin) shows every view
the chapters use: the browser test moves a slider of each (tests/course/test_browser.py)."""
import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOURS = {"en": ROOT / "tests" / "fixtures" / "widget_tour.ipynb",
         "zh": ROOT / "tests" / "fixtures" / "zh" / "widget_tour.ipynb"}


def _code(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def widget_names(sources) -> set[str]:
    """Names imported from milktea.widgets (or its modules) in these code cells."""
    names = set()
    for src in sources:
        try:
            tree = ast.parse("\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!"))))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("milktea.widgets"):
                names |= {a.asname or a.name for a in node.names}
    return names


def test_the_tour_shows_every_view_the_chapters_use():
    chapters = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
    used = widget_names(src for p in chapters for src in _code(p)) - {"reveal"}  # reveal: an answer, no slider
    tour = "\n".join(_code(TOURS["en"]))
    called = {name for name in used if re.search(rf"\b{re.escape(name)}\(", tour)}
    assert used, "no chapter shows a view?"
    assert called == used, f"add to tests/fixtures/widget_tour.ipynb (and zh/): {sorted(used - called)}"


def test_the_two_tours_differ_only_in_language():
    en, zh = (_code(p) for p in TOURS.values())
    assert [s.replace('i18n.use("en")', 'i18n.use("zh")') for s in en] == zh


def test_widget_names_reads_imports():
    assert widget_names(["from milktea.widgets import a, b as c\nimport milktea", "from milktea.widgets.x import d",
                         "%matplotlib inline\nfrom milktea import widgets"]) == {"a", "c", "d"}
