"""The course on disk: the exercises this copy of the course holds, and the chapter each
belongs to. The welcome chapter's list of exercises and the README's come from the folder,
so they stay true when an exercise is added.

An exercise is a student notebook `exercises/NN_<slug>.ipynb` with its public checks
`NN_<slug>.checks.json` beside it (the Chinese notebook in `exercises/zh/` uses the same
checks); its chapter is the notebook `notebooks/NN_*.ipynb` (`notebooks/zh/` for Chinese)
with the same number.

    >>> [e.name for e in exercises(course_root(Path(__file__)), "en")][:2]
    ['01_bottleneck', '02_compression']
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..i18n import N_, _, language

CHECKS = ".checks.json"
NAME = re.compile(r"^(\d\d[a-z]?)_[a-z0-9_]+$")


@dataclass(frozen=True)
class Exercise:
    name: str            # "04_error_feedback"
    path: Path           # the student notebook, in the reader's language
    chapter: str         # "04"
    title: str           # the chapter's title, from its notebook's first heading ("" if none)
    tasks: int           # graded cells (tagged task:...)


def course_root(start: str | Path | None = None) -> Path:
    """The course folder (the one holding notebooks/ and exercises/): `start` (default: the
    current folder, where a chapter's kernel runs) or the nearest folder above it."""
    here = Path(start or ".").resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir() and (folder / "exercises").is_dir():
            return folder
    raise FileNotFoundError(f"no course folder (with notebooks/ and exercises/) at or above {here}: "
                            f"start JupyterLab with `make lab` from the course folder")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8")).get("cells", [])


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def chapter_title(path: Path) -> str:
    """'Error feedback: the old ledger' from a chapter whose first line is '# 04 · Error feedback: ...'."""
    for cell in _cells(path)[:1]:
        first = _source(cell).strip().splitlines()[:1]
        if first and first[0].startswith("# "):
            return first[0][2:].split("·", 1)[-1].strip()
    return ""


def exercises(root: str | Path | None = None, lang: str | None = None) -> list[Exercise]:
    """Every exercise of the course folder `root` (default: found from here), in chapter
    order, as the reader of `lang` (default: the language the library speaks) opens it."""
    root = course_root() if root is None else Path(root)
    lang = language() if lang is None else lang
    sub = "" if lang == "en" else lang
    found = []
    for checks in sorted((root / "exercises").glob("*" + CHECKS)):
        name = checks.name[:-len(CHECKS)]
        notebook = root / "exercises" / sub / f"{name}.ipynb"
        m = NAME.match(name)
        if not m or not notebook.is_file():
            continue
        chapters = sorted((root / "notebooks" / sub).glob(f"{m.group(1)}_*.ipynb"))
        title = chapter_title(chapters[0]) if chapters else ""
        tasks = sum(any(str(t).startswith("task:") for t in c.get("metadata", {}).get("tags", []))
                    for c in _cells(notebook) if c.get("cell_type") == "code")
        found.append(Exercise(name, notebook, m.group(1), title, tasks))
    return found


COLUMNS = (N_("exercise"), N_("chapter"), N_("graded tasks"))


def exercise_table(root: str | Path | None = None, lang: str | None = None) -> list[dict]:
    """exercises() as table rows (headers in the reader's language), the notebook's path
    relative to the course folder."""
    root = course_root() if root is None else Path(root)
    return [{_(COLUMNS[0]): f"`{e.path.relative_to(root).as_posix()}`", _(COLUMNS[1]): f"{e.chapter} · {e.title}",
             _(COLUMNS[2]): e.tasks} for e in exercises(root, lang)]
