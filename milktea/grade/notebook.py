"""Reading exercise notebooks safely and finding their graded cells.

A graded cell is a code cell whose metadata tags include "graded" and "task:<id>" (for
example "task:03.1"). Only those cells reach the grader; everything else in a notebook is
ignored, so a learner's scratch cells can't break grading. Notebooks are read as plain
JSON (no nbformat needed) and checked piece by piece: a broken file gets a clear message.
"""
from __future__ import annotations

import json
import os
import re

from ..i18n import _
from .protocol import Cell
from .text import lazy

MAX_FILE_BYTES = 64 << 20   # a notebook file as submitted, stored outputs (plots) included
MAX_CODE_BYTES = 2 << 20    # the source of all its cells, once the outputs are dropped
MAX_CELLS = 20_000          # the code limit binds first for any real notebook
MAX_EXTRA_GRADED = 100      # graded cells with no task of this assignment that still run
CHAPTER = re.compile(r"^(\d\d)")


class NotebookError(ValueError):
    """The file is not a notebook the grader can read; the message says what is wrong."""


def read_notebook(path: str, strip: bool = False) -> dict:
    """Parse and check a .ipynb file. Raises NotebookError with a learner-readable reason.
    `strip` drops the stored outputs (the grader never needs them)."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise NotebookError(lazy("{name} is {size} MB, over the {limit} MB limit: clear its outputs "
                                     "(Edit > Clear All Outputs) and save", name=name, size=size >> 20,
                                     limit=MAX_FILE_BYTES >> 20))
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise NotebookError(lazy("{name} could not be read: {why}", name=name, why=e.strerror or e)) from None
    return parse_notebook(raw, name, strip)


def parse_notebook(raw: bytes, name: str, strip: bool = True) -> dict:
    """Check a notebook's bytes piece by piece. Only the cells' text counts against the code
    limit, never their stored outputs (dropped when `strip`): a notebook full of plots is
    graded like a clean one."""
    if len(raw) > MAX_FILE_BYTES:
        raise NotebookError(lazy("{name} is over the {limit} MB limit: clear its outputs and save", name=name,
                                 limit=MAX_FILE_BYTES >> 20))
    try:
        nb = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise NotebookError(lazy("{name} is not a notebook (not valid JSON): was it saved from Jupyter?",
                                 name=name)) from None
    del raw
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(lazy("{name} has no list of cells: it is not a Jupyter notebook", name=name))
    if len(nb["cells"]) > MAX_CELLS:
        raise NotebookError(lazy("{name} has {n} cells; at most {limit} are read", name=name, n=len(nb["cells"]),
                                 limit=MAX_CELLS))
    code = 0
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(lazy("{name}: cell {n} is malformed", name=name, n=i + 1))
        if strip:
            cell.pop("outputs", None)
            cell.pop("attachments", None)
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            cell["source"] = "".join(src)
        elif not isinstance(src, str):
            raise NotebookError(lazy("{name}: cell {n} has no readable source", name=name, n=i + 1))
        code += len(cell["source"])
        if not isinstance(cell.get("metadata", {}), dict):
            cell["metadata"] = {}
    if code > MAX_CODE_BYTES:
        raise NotebookError(lazy("{name} holds {size} KB of text in its cells, over the {limit} KB limit",
                                 name=name, size=code >> 10, limit=MAX_CODE_BYTES >> 10))
    if not isinstance(nb.get("metadata", {}), dict):
        nb["metadata"] = {}
    return nb


def notebook_text(nb: dict) -> str:
    """Jupyter's own layout: sorted keys, indent 1, one source line per list item."""
    out = dict(nb, cells=[dict(c, source=c["source"].splitlines(True)) if isinstance(c["source"], str) else c
                          for c in nb["cells"]])
    return json.dumps(out, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def atomic_write(path: str, text: str) -> None:
    """Write a temporary file next to `path`, flush it to disk, then rename it over `path`:
    a reader sees the old file or the new one, never half of one."""
    tmp = f"{path}.milktea-tmp{os.getpid()}"   # outdir.py removes these after a crash
    with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def tags(cell: dict) -> list:
    t = cell.get("metadata", {}).get("tags", [])
    return [x for x in t if isinstance(x, str)] if isinstance(t, list) else []


def cell_tasks(cell: dict) -> list:
    """Task ids a cell is tagged with ("task:03.1" -> "03.1"), if it is a graded code cell."""
    if cell.get("cell_type") != "code" or "graded" not in tags(cell):
        return []
    return [t[5:] for t in tags(cell) if t.startswith("task:")]


def notebook_language(path: str, nb: dict | None, by_folder: bool = True) -> str:
    """The language of an exercise notebook, for the feedback on it: its metadata
    (`"milktea": {"lang": "zh"}`, which make_exercises writes into exercises/zh/), else "zh"
    for a notebook in a folder named zh/ (when `by_folder`), else "en".

    >>> notebook_language("exercises/zh/03_topk.ipynb", None), notebook_language("03_topk.ipynb", None)
    ('zh', 'en')
    """
    meta = (nb or {}).get("metadata", {}).get("milktea", {})
    lang = meta.get("lang") if isinstance(meta, dict) else None
    if lang in ("en", "zh"):  # anything else in a (student-edited) file is ignored
        return lang
    in_zh = by_folder and os.path.basename(os.path.dirname(os.path.abspath(path))) == "zh"
    return "zh" if in_zh else "en"


def assignment_of(path: str, nb: dict | None, known) -> str | None:
    """Which assignment a notebook is: its metadata (`milktea.assignment`, written by the
    release), else its file name: the name itself, a copy of it ("03_topk (1).ipynb"), or the
    two leading digits of the course's chapters when one assignment alone starts with them.

    >>> assignment_of("hw2 (1).ipynb", None, ["hw1", "hw2"]), assignment_of("03_mine.ipynb", None, ["03_topk"])
    ('hw2', '03_topk')
    """
    meta = (nb or {}).get("metadata", {}).get("milktea", {})
    if isinstance(meta, dict):
        for key in ("assignment", "chapter"):
            if isinstance(meta.get(key), str) and meta[key] in known:
                return meta[key]
    stem = os.path.basename(path)
    for suffix in (".ipynb", ".py"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    if stem in known:
        return stem
    copies = [k for k in known if stem.startswith(k) and not (stem[len(k):len(k) + 1].isalnum()
                                                              or stem[len(k):len(k) + 1] == "_")]
    if copies:
        return max(copies, key=len)
    m = CHAPTER.match(stem)
    if m:
        same = [k for k in known if k.startswith(m.group(1))]
        if len(same) == 1:
            return same[0]
    return None


def graded_cells(nb: dict, tasks) -> tuple[list, dict, list]:
    """The cells to run, which cell holds each task, and notes for the learner.

    A task whose tagged cell is missing (tags lost by copy-paste) falls back to the last
    untagged code cell that defines its function, with a note saying so."""
    cells, where, notes = [], {}, []
    wanted = {t.id: t for t in tasks}
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    extra = 0
    for i, cell in enumerate(code):
        ids = [t for t in cell_tasks(cell) if t in wanted]
        if not ids and "graded" not in tags(cell):
            continue
        if not ids:
            extra += 1
            if extra > MAX_EXTRA_GRADED:
                continue
        key = f"c{i}"
        label = (_("the cell of task {id}").format(id=", ".join(ids)) if ids else
                 _("graded code cell {n}").format(n=i + 1))
        cells.append(Cell(key, label, cell["source"]))
        for t in ids:
            where[t] = key
    for task in tasks:
        if task.id in where:
            continue
        pattern = re.compile(rf"^\s*def\s+{re.escape(task.function)}\s*\(", re.M)
        found = [i for i, c in enumerate(code) if pattern.search(c["source"]) and not cell_tasks(c)]
        if found:
            i = found[-1]
            key = f"c{i}"
            if key not in {c.key for c in cells}:
                cells.append(Cell(key, _("code cell {n} (untagged, defines {function})").format(
                    n=i + 1, function=task.function), code[i]["source"]))
            where[task.id] = key
            notes.append(_("task {id}: no cell tagged 'task:{id}', so the untagged code cell {n} that defines "
                           "{function} was used").format(id=task.id, n=i + 1, function=task.function))
    if extra > MAX_EXTRA_GRADED:
        notes.append(_("{n} code cells are tagged 'graded' without a task of this exercise; the first {ran} ran, "
                       "the other {rest} did not").format(n=extra, ran=MAX_EXTRA_GRADED, rest=extra - MAX_EXTRA_GRADED))
    order = {f"c{i}": i for i in range(len(code))}
    cells.sort(key=lambda c: order[c.key])
    return cells, where, notes
