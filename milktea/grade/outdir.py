"""The class grader's output folder: what may be written there, and what is removed from it.

Three rules, each checked or kept here:
  - `--out` never lies inside the submissions, the solutions or the hidden tests (nor is one of
    them): refused before anything is written (`check`);
  - a run that fails before grading (a failing reference, a bad overrides file) writes nothing:
    the folder is only made once every trusted input has been read (`make`, called then);
  - a rerun leaves exactly the files of this run: what the grader wrote last time and did not
    write now (a student renamed by a roster, one no longer in the folder) is removed, and only
    that. The list of what the grader wrote is kept in `.state/.written`; a file it does not
    name (an instructor's own notes) is never touched.

    >>> is_inside("/a/b/out", "/a/b"), is_inside("/a/bc", "/a/b"), is_inside("/a/b", "/a/b")
    (True, False, True)
"""
from __future__ import annotations

import json
import os
import re
import secrets

from .assignment import SetupError

MANIFEST = os.path.join(".state", ".written")
FOLDERS = ("results", "feedback", ".state")
_TMP = re.compile(r"\.milktea-tmp\d+$")   # notebook.atomic_write's temporary files


def is_inside(path: str, folder: str) -> bool:
    """Is `path` the folder itself or anything below it (after resolving links)?"""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def check(out: str, inputs: dict) -> None:
    """SetupError when --out lies inside one of `inputs` ({option: folder}), or is not a folder."""
    for option, folder in inputs.items():
        if folder and is_inside(out, folder):
            raise SetupError(f"--out {out} lies inside {option} {folder}: the grader's files would mix with "
                             f"yours (and be read back as input). Choose a folder outside it; nothing was written")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise SetupError(f"--out {out} exists and is not a folder: nothing was written")


def seed(out: str, given):
    """The seed: `given`, else the one recorded in OUT/run.json by an earlier run, else a new one."""
    if given is None:
        try:
            with open(os.path.join(out, "run.json")) as f:
                given = json.load(f).get("seed")
        except (OSError, ValueError, AttributeError):
            given = None
    return secrets.randbelow(10**9) if not isinstance(given, int) or isinstance(given, bool) else given


def make(out: str) -> None:
    """Create the folder and its sub-folders; remove the temporary files of a run killed mid-write."""
    for sub in FOLDERS + (".",):
        folder = os.path.join(out, sub)
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            if _TMP.search(name):
                os.remove(os.path.join(folder, name))


def _listed(out: str) -> set:
    try:
        with open(os.path.join(out, MANIFEST), encoding="utf-8") as f:
            names = json.load(f)
        return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()
    except (OSError, ValueError):
        return set()


def tidy(out: str, written: set) -> list:
    """Remove what the last run wrote and this one did not; record `written` (paths relative to
    `out`). Returns the removed paths. Only paths of the grader's own sub-folders are touched."""
    removed = []
    for rel in sorted(_listed(out) - set(written)):
        parts = rel.split("/")
        if len(parts) != 2 or parts[0] not in FOLDERS or parts[1] in ("", ".", "..") or rel == MANIFEST:
            continue   # a manifest never names anything else; an edited one is not trusted further
        path = os.path.join(out, *parts)
        if os.path.isfile(path) and not os.path.islink(path):
            os.remove(path)
            removed.append(rel)
    from .notebook import atomic_write
    atomic_write(os.path.join(out, MANIFEST), json.dumps(sorted(written), indent=0) + "\n")
    return removed
