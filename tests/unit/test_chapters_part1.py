"""Chapters 00-04 keep their shape: goals, story, a view, a summary, questions, and a
pointer to an exercise that exists. (Running them is tests/course/test_notebooks.py's job.)"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = {"00_welcome": None, "01_bottleneck": "01_bottleneck", "02_compression": "02_compression",
            "03_topk": "03_topk", "04_error_feedback": "04_error_feedback"}
VIEWS = {"00_welcome": "phone_night_view", "01_bottleneck": "bottleneck_view",
         "02_compression": "compression_view", "03_topk": "topk_view_widget", "04_error_feedback": "ledger_view"}


def _cells(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_its_parts(name):
    cells = _cells(name)
    md = "\n".join(src for kind, src in cells if kind == "markdown")
    code = "\n".join(src for kind, src in cells if kind == "code")
    assert cells[0][0] == "markdown" and cells[0][1].startswith(f"# {name[:2]} ")
    assert "In this chapter you will" in cells[0][1], "learning goals at the top"
    for part in ("## Summary", "## Check yourself", "<details>"):
        assert part in md, f"{name}: missing {part!r}"
    assert "$" in md, f"{name}: the idea deserves a formula"
    assert VIEWS[name] in code, f"{name}: its interactive view is not shown"
    assert "plt.show()" in code or "plot" in code, f"{name}: no figure"


@pytest.mark.parametrize("name, exercise", [(n, e) for n, e in CHAPTERS.items() if e])
def test_chapter_points_to_an_exercise_that_exists(name, exercise):
    md = "\n".join(src for kind, src in _cells(name) if kind == "markdown")
    assert f"exercises/{exercise}.ipynb" in md
    assert f"python -m milktea.grade.check {exercise}.ipynb" in md
    assert (ROOT / "exercises" / f"{exercise}.ipynb").exists(), f"exercises/{exercise}.ipynb is missing"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_chapter_ids_are_stable_and_links_resolve(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    ids = [c["id"] for c in nb["cells"]]
    number = name.split("_")[0]          # 06, or 06b for a chapter's second part
    assert len(set(ids)) == len(ids) and all(i.startswith(f"ch{number}-") for i in ids), \
        f"{name}: cell ids are ch{number}-..., each once"
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for link in re.findall(r"\]\(([^)]+\.ipynb)\)", md):
        assert (ROOT / "notebooks" / link).exists(), f"{name}: link to {link} leads nowhere"
