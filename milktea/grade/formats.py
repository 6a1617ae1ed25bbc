"""What a submitted file holds, as a notebook: .ipynb as it is, .py as code cells, .zip unpacked
in memory. The bytes come from submissions.py (read without following links); nothing here
touches the disk.

A .py file's text is one code cell, or, in Jupytext's percent format, one cell per `# %%`
marker, whose `tags=[...]` become the cell's tags (so a notebook exported with its tags keeps
its graded cells). A .zip's .ipynb and .py members count like files in the student's folder;
sizes and counts are checked before anything is inflated.

    >>> [c["metadata"].get("tags") for c in notebook_from_python(b'# %% tags=["graded", "task:1"]\\nx = 1\\n')["cells"]]
    [['graded', 'task:1']]
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass

from .notebook import MAX_CODE_BYTES, MAX_FILE_BYTES, NotebookError, parse_notebook
from .text import lazy

SUFFIXES = (".ipynb", ".py")          # files that are graded; .zip files are opened
MAX_MEMBERS = 2000                    # names looked at in one zip
MAX_ZIP_BYTES = 64 << 20              # what a zip may inflate to, all members together
_MARK = re.compile(r"^# %%(?P<rest>.*)$")


@dataclass
class Submission:
    """One notebook, read once: what is graded is exactly what was hashed."""
    shown: str                  # student-relative path, printable
    digest: str                 # sha256 of the bytes read
    nb: dict | None = None      # parsed, outputs dropped; None when unreadable
    error: object = ""          # why it could not be read (text, or a text.Lazy said in the learner's language)
    note: object = ""           # how it was read, when that is worth saying (a .py file)


def notebook_from_python(raw: bytes, name: str = "file.py") -> dict:
    """A .py file as a notebook: one code cell, or one per Jupytext `# %%` marker."""
    if len(raw) > MAX_CODE_BYTES:
        raise NotebookError(lazy("{name} holds {size} KB of code, over the {limit} KB limit", name=name,
                                 size=len(raw) >> 10, limit=MAX_CODE_BYTES >> 10))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotebookError(lazy("{name} is not UTF-8 text: save it as UTF-8", name=name)) from None
    cells, source, meta, kind = [], [], {}, "code"

    def close():
        body = "".join(source).strip("\n")
        if body or meta:
            cells.append({"cell_type": kind, "metadata": dict(meta), "source": body + "\n"})

    for line in text.splitlines(True):
        m = _MARK.match(line.rstrip("\n"))
        if not m:
            source.append(line)
            continue
        close()
        source, meta, kind = [], {}, "markdown" if "[markdown]" in m["rest"] else "code"
        tags = re.search(r"tags=(\[.*?\])", m["rest"])
        if tags:
            try:
                found = json.loads(tags.group(1))
                meta = {"tags": [t for t in found if isinstance(t, str)]} if isinstance(found, list) else {}
            except ValueError:
                meta = {}
    close()
    nb = {"cells": cells or [{"cell_type": "code", "metadata": {}, "source": ""}], "metadata": {},
          "nbformat": 4, "nbformat_minor": 5}
    return parse_notebook(json.dumps(nb).encode(), name)


def submission(raw: bytes, rel: str) -> Submission:
    """The Submission a file's bytes make (by the file's suffix)."""
    digest = hashlib.sha256(raw).hexdigest()
    try:
        if rel.endswith(".py"):
            return Submission(rel, digest, nb=notebook_from_python(raw, rel),
                              note=lazy("{path}: a Python file, graded like a notebook whose cells it holds", path=rel))
        return Submission(rel, digest, nb=parse_notebook(raw, rel))
    except NotebookError as e:
        return Submission(rel, digest, error=e.args[0])


def zip_members(raw: bytes, rel: str) -> tuple[list, list]:
    """([(member path, bytes)] of the .ipynb and .py files in a zip, [notes]). Sizes are
    checked from the zip's directory first, then while reading (a lying header is caught)."""
    notes, out = [], []
    try:
        z = zipfile.ZipFile(io.BytesIO(raw))
        infos = z.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as e:
        return [], [lazy("{path}: not a zip file that can be read ({why}): nothing in it was graded", path=rel,
                         why=type(e).__name__)]
    if len(infos) > MAX_MEMBERS:
        notes.append(lazy("{path}: more than {n} files inside; only the first were looked at", path=rel, n=MAX_MEMBERS))
        infos = infos[:MAX_MEMBERS]
    budget, skipped = MAX_ZIP_BYTES, []
    for info in infos:
        name = info.filename.replace("\\", "/")
        base = name.rsplit("/", 1)[-1]
        if info.is_dir() or name.startswith("__MACOSX/") or base.startswith("."):
            continue
        if not base.endswith(SUFFIXES):
            skipped.append(base)
            continue
        if info.file_size > min(budget, MAX_FILE_BYTES):
            notes.append(lazy("{path}: {size} MB once unpacked, over the limit: not graded", path=f"{rel}/{name}",
                              size=info.file_size >> 20))
            continue
        try:
            with z.open(info) as f:
                data = f.read(min(budget, MAX_FILE_BYTES) + 1)
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError, ValueError, OSError, EOFError) as e:
            notes.append(lazy("{path}: could not be unpacked ({why}; encrypted?): not graded", path=f"{rel}/{name}",
                              why=type(e).__name__))
            continue
        if len(data) > min(budget, MAX_FILE_BYTES):
            notes.append(lazy("{path}: larger once unpacked than its header says: not graded", path=f"{rel}/{name}"))
            continue
        budget -= len(data)
        out.append((f"{rel}/{name}", data))
    if skipped:
        notes.append(lazy("{path}: ignored {names} (only .ipynb and .py files are graded)", path=rel,
                          names=", ".join(sorted(skipped)[:5]) + (" ..." if len(skipped) > 5 else "")))
    return out, notes
