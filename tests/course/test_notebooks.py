"""Every course notebook runs top to bottom in a fresh kernel; none is stored with outputs.

The chapters are notebooks/*.ipynb and the Chinese edition's notebooks/zh/*.ipynb, found at
run time (the template below is the English edition's; tests/unit/test_zh_parity.py holds the
Chinese one to the same cells); tests/fixtures/widgets_demo.ipynb
(a figure and a slider-driven view) runs beside them so the harness itself is always exercised.
Each notebook is executed once per test run (tests/executed.py): the English chapters at full
size, the Chinese ones with MILKTEA_SIZE=small, and every test that reads outputs shares them.
"""
import json
import re
import sys
from pathlib import Path

import pytest

from executed import ROOT, NotebookFailed, executed, run_notebook

ENGLISH = sorted((ROOT / "notebooks").glob("*.ipynb"))
CHINESE = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
CHAPTERS = ENGLISH + CHINESE
FIXTURE = ROOT / "tests" / "fixtures" / "widgets_demo.ipynb"
STORED = sorted(p for folder in ("notebooks", "exercises", "solutions", "tests/fixtures")
                for p in (ROOT / folder).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def _id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def ran(path: Path):
    """The executed copy of `path`, or the test fails with the cell that stopped it."""
    try:
        return executed(path)
    except NotebookFailed as e:
        pytest.fail(str(e), pytrace=False)


@pytest.mark.notebooks
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xdist_group(_id(p)))
                                  for p in CHAPTERS + [FIXTURE]], ids=_id)
def test_notebook_runs_top_to_bottom(path, wall_times):
    run = ran(path)
    nb, times = run.nb, run.times
    assert sorted(times) == [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if path == FIXTURE:  # the harness itself: figures are really drawn, widgets displayed
        kinds = [set(o.get("data", {})) for c in nb.cells if c.cell_type == "code"
                 for o in c.outputs]
        assert any("image/png" in k for k in kinds), "the inline backend drew no figure"
        assert any("application/vnd.jupyter.widget-view+json" in k for k in kinds)
        assert nb.metadata.get("widgets"), "the widget state was not saved for the browser"
    wall_times.setdefault("notebooks (fresh kernel, top to bottom)", {})[f"{_id(path)} ({run.size})"] = run.seconds
    if times:
        slowest = max(times, key=times.get)
        wall_times.setdefault("slowest cell of each notebook", {})[
            f"{_id(path)} cell {slowest}"] = times[slowest]


@pytest.mark.notebooks
@pytest.mark.timeout(1800)   # it may wait for the chapter's run
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xdist_group(_id(p))) for p in CHINESE], ids=_id)
def test_chinese_chapter_shows_no_english(path):
    """Everything the executed Chinese chapter shows (printed text, tables, reprs, figures'
    glyph warnings, widget labels) is Chinese, but for the allow-list of tests/course/zh_scan.py."""
    from zh_scan import scan
    findings = scan(ran(path).nb)
    assert not findings, f"{_id(path)} shows, at run time:\n" + "\n".join(map(str, findings[:40])) + \
        (f"\n... and {len(findings) - 40} more" if len(findings) > 40 else "")


@pytest.mark.parametrize("path", STORED, ids=_id)
def test_notebook_is_stored_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{_id(path)}: not an nbformat 4 notebook"
    fix = "run: make strip (nbstripout --keep-id)"
    assert "widgets" not in nb.get("metadata", {}), f"{_id(path)} stores widget state; {fix}"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{_id(path)}: cell {i} has stored outputs; {fix}"
        assert cell.get("execution_count") is None, \
            f"{_id(path)}: cell {i} has an execution count; {fix}"


# a chapter's file: its number (two digits, and a letter for a chapter's second part: 06b), then its slug
CHAPTER_NAME = r"\d\d[a-z]?_[a-z0-9_]+\.ipynb"


@pytest.mark.parametrize("edition", [ENGLISH, CHINESE], ids=["en", "zh"])
def test_chapters_are_named_by_number(edition):
    names = [p.name for p in edition]
    for name in names:
        assert re.fullmatch(CHAPTER_NAME, name), \
            f"chapter {name!r}: name it notebooks/NN_<slug>.ipynb, or NNb_<slug>.ipynb for a chapter's second " \
            "part (lower case, underscores)"
    numbers = [name.split("_")[0] for name in names]
    assert len(set(numbers)) == len(numbers), f"two chapters share a number: {names}"


def test_chapter_names_allow_a_second_part_only():
    ok = ["06_engineering.ipynb", "06b_low_rank.ipynb"]
    bad = ["6_engineering.ipynb", "06B_low_rank.ipynb", "06bb_low_rank.ipynb", "06-b_low_rank.ipynb"]
    assert [bool(re.fullmatch(CHAPTER_NAME, n)) for n in ok + bad] == [True] * 2 + [False] * 4


@pytest.mark.parametrize("edition", [ENGLISH, CHINESE], ids=["en", "zh"])
def test_next_links_walk_the_chapters_in_order(edition):
    """Each chapter's last link after its Next line leads to the chapter that follows it by name
    (06 -> 06b -> 07): a split chapter is read in order, in both editions."""
    for here, after in zip(edition, edition[1:]):
        nb = json.loads(here.read_text(encoding="utf-8"))
        md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        last = md[max(md.rfind("**Next:**"), md.rfind("**下一章：**")):]
        assert f"]({after.name})" in last, f"{_id(here)}: its Next link should lead to {after.name}"


def _nbstripout(*args):
    """nbstripout as `make strip` and the pre-commit hook run it (cell ids kept)."""
    pytest.importorskip("nbstripout", reason="nbstripout is in the test extra: pip install -e '.[test]'")
    import subprocess
    return subprocess.run([sys.executable, "-m", "nbstripout", "--keep-id", *args],
                          capture_output=True, text=True, timeout=300)


def test_stored_notebooks_are_what_nbstripout_leaves():
    out = _nbstripout("--verify", *map(str, STORED))
    assert out.returncode == 0, f"notebooks with outputs or run metadata; run: make strip\n{out.stdout}{out.stderr}"


def test_strip_tool_removes_outputs(tmp_path):
    nb = json.loads(FIXTURE.read_text(encoding="utf-8"))
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}]
    code["execution_count"] = 3
    code["metadata"]["execution"] = {"iopub.status.idle": "2024-01-01T00:00:00Z"}
    dirty = tmp_path / "dirty.ipynb"
    dirty.write_text(json.dumps(nb), encoding="utf-8")
    assert _nbstripout("--verify", str(dirty)).returncode == 1
    assert _nbstripout(str(dirty)).returncode == 0
    assert _nbstripout("--verify", str(dirty)).returncode == 0
    assert dirty.read_text(encoding="utf-8") == FIXTURE.read_text(encoding="utf-8")  # ids kept


def test_harness_names_the_failing_cell(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("# broken"), new_code_cell("x = 1"),
                             new_code_cell("y = x / 0"), new_code_cell("never = True")])
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(NotebookFailed) as e:
        run_notebook(path)
    msg = str(e.value)
    assert "cell 2 failed" in msg and "ZeroDivisionError" in msg and "y = x / 0" in msg


# --- one template for every chapter ---------------------------------------------------------
# (what, a test on the chapter's markdown and code) -- each chapter must have all of them
SKELETON = [
    ("learning goals", lambda md, code: "**In this chapter you will**" in md),
    ("the story", lambda md, code: re.search(r"^## The story", md, re.M) is not None),
    ("a displayed formula", lambda md, code: "$$" in md),
    ("a library call", lambda md, code: re.search(r"^\s*(from milktea|import milktea)", code, re.M) is not None),
    ("an interactive view", lambda md, code: re.search(r"from milktea\.widgets", code) is not None),
    ("a summary", lambda md, code: re.search(r"^## Summary", md, re.M) is not None),
    ("an exercise pointer", lambda md, code: re.search(r"^## Exercise", md, re.M) is not None),
    ("check-yourself questions with answers",
     lambda md, code: re.search(r"^## Check yourself", md, re.M) is not None and "<summary>Answers</summary>" in md),
    ("a Next link", lambda md, code: re.search(r"\*\*Next:\*\*[^\n]*\]\(" + CHAPTER_NAME + r"\)", md) is not None),
]


@pytest.mark.parametrize("path", ENGLISH, ids=_id)
def test_chapter_follows_the_template(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    text = lambda kind: "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind)
    md, code = text("markdown"), text("code")
    missing = [what for what, ok in SKELETON if not ok(md, code)]
    assert not missing, f"{_id(path)} lacks: {', '.join(missing)}"
    order = [md.find("**In this chapter you will**"), md.find("## Summary"), md.rfind("**Next:**")]
    assert order == sorted(order), f"{_id(path)}: goals, then the summary, then the Next link"
    for target in re.findall(r"\*\*Next:\*\*[^\n]*?\]\((" + CHAPTER_NAME + r")\)", md):
        assert (path.parent / target).exists(), f"{_id(path)}: the Next link points to a missing {target}"


def test_template_check_catches_a_missing_part():
    nb = json.loads(ENGLISH[1].read_text(encoding="utf-8"))
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert all(ok(md, code) for _, ok in SKELETON)
    broken = md.replace("## Check yourself", "## Questions")
    assert [w for w, ok in SKELETON if not ok(broken, code)] == ["check-yourself questions with answers"]
