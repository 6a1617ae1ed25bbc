"""Who a submission belongs to: learning-management-system download names, and the roster.

A class's submissions folder often comes from an LMS download, whose names carry the student:

    Canvas      flat files   ada_12345_678901_03_topk.ipynb   (login[_LATE]_userid_submissionid_name)
    Moodle      a folder     Ada Lovelace_4321_assignsubmission_file_/03_topk.ipynb
    Gradescope  a folder     submission_123456/  (submission_metadata.yml beside it names the submitters)

`keys(name)` lists what a name says about its student; a roster (CSV with a header: an id
column, then any columns of names, emails or LMS ids) maps any of those keys to the id the
grade table uses. Keys are compared case-insensitively, spaces collapsed.

    >>> keys("ada_LATE_12345_678901_03_topk.ipynb")
    (['ada', '12345'], '03_topk.ipynb')
    >>> keys("Ada Lovelace_4321_assignsubmission_file_")
    (['Ada Lovelace', '4321'], None)
"""
from __future__ import annotations

import csv
import io
import re

from .assignment import SetupError

_CANVAS = re.compile(r"^(?P<login>[^_/]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<sub>\d+)_(?P<orig>.+)$")
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<pid>\d+)_assignsubmission_(?:file|onlinetext)_?$")
ID_COLUMNS = ("id", "student", "student_id", "student id", "sid", "login", "username", "user")
MAX_ROSTER_BYTES = 8 << 20


def norm(key: str) -> str:
    return " ".join(str(key).split()).casefold().strip("'\"")


def keys(name: str) -> tuple[list, str | None]:
    """(what the name says about its student, the original file name inside it or None)."""
    m = _CANVAS.match(name)
    if m:
        return [m["login"], m["uid"]], m["orig"]
    m = _MOODLE.match(name)
    if m:
        return [m["name"], m["pid"]], None
    return [], None


def late(name: str) -> bool | None:
    """True when an LMS download name says the submission was late (Canvas's `_LATE_`), else None.

    >>> late("ada_LATE_12345_678901_03_topk.ipynb"), late("ada_12345_678901_03_topk.ipynb")
    (True, None)
    """
    m = _CANVAS.match(name)
    return True if m and m["late"] else None


def gradescope_submitters(text: str) -> dict:
    """{"submission_123": [sid, email, name, ...]} from Gradescope's submission_metadata.yml,
    read line by line (only the submitters' :sid:, :email: and :name: are needed)."""
    out, current = {}, None
    for line in text.splitlines():
        top = re.match(r"^(submission_\d+):\s*$", line)
        if top:
            current = out.setdefault(top.group(1), [])
            continue
        field = re.match(r"^\s*-?\s*:(sid|email|name):\s*(.*?)\s*$", line)
        if field and current is not None and field.group(2) not in ("", "~", "null"):
            current.append(field.group(2).strip("'\""))
    return out


def gradescope_times(text: str) -> dict:
    """{"submission_123": "2026-12-01 23:10:11.000000000 -08:00"}: each submission's
    :created_at: in Gradescope's submission_metadata.yml (the submission's own line, two
    spaces in; the submitters' lines are deeper).

        >>> gradescope_times("submission_7:\\n  :created_at: 2026-12-02 08:00:00 +00:00\\n")
        {'submission_7': '2026-12-02 08:00:00 +00:00'}
    """
    out, current = {}, None
    for line in text.splitlines():
        top = re.match(r"^(submission_\d+):\s*$", line)
        if top:
            current = top.group(1)
            continue
        field = re.match(r"^  :created_at:\s*(.*?)\s*$", line)
        if field and current is not None and field.group(1) not in ("", "~", "null"):
            out[current] = field.group(1).strip("'\"")
    return out


class Roster:
    """The class list: `ids` in order, and every alias of each id."""

    def __init__(self, rows: list, where: str = "roster", columns=()):
        self.ids, self.alias, self.columns, self._info = [], {}, list(columns), {}
        for n, (sid, aliases) in enumerate(rows, 2):
            self._info[sid] = [a.strip() for a in aliases]
            if not sid:
                raise SetupError(f"{where}, line {n}: no student id")
            if sid in self.ids:
                raise SetupError(f"{where}, line {n}: the id {sid!r} appears twice")
            self.ids.append(sid)
            for key in {norm(sid), *(norm(a) for a in aliases if a and a.strip())}:
                other = self.alias.setdefault(key, sid)
                if other != sid:
                    raise SetupError(f"{where}, line {n}: {key!r} names both {other} and {sid}: "
                                     "make the roster's names and ids unique")

    @classmethod
    def read(cls, path: str) -> "Roster":
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_ROSTER_BYTES + 1)
        except OSError as e:
            raise SetupError(f"--roster {path} could not be read: {e.strerror or e}") from None
        if len(raw) > MAX_ROSTER_BYTES:
            raise SetupError(f"--roster {path} is over {MAX_ROSTER_BYTES >> 20} MB")
        text = raw.decode("utf-8-sig", "replace")
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
        if len(rows) < 2:
            raise SetupError(f"--roster {path} needs a header row and one row per student "
                             "(e.g. id,name,email)")
        header = [norm(h) for h in rows[0]]
        col = next((header.index(c) for c in ID_COLUMNS if c in header), 0)
        return cls([(r[col].strip() if col < len(r) else "", [c for i, c in enumerate(r) if i != col])
                    for r in rows[1:]], f"--roster {path}", [h.strip() for i, h in enumerate(rows[0]) if i != col])

    def info(self, sid: str) -> list:
        """The roster's other columns (names, emails, ...) for `sid`; empty for one not on it."""
        values = self._info.get(sid, [])
        return (values + [""] * len(self.columns))[:len(self.columns)]

    def find(self, candidates) -> str | None:
        """The id that any of `candidates` names, or None."""
        for c in candidates:
            sid = self.alias.get(norm(c))
            if sid is not None:
                return sid
        return None


def read_overrides(path: str) -> list:
    """[(student, task, points or None, comment)] from a CSV with the header student,task,points,comment:
    the instructor's own grade for a task (points) and a word for the learner (comment)."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_ROSTER_BYTES).decode("utf-8-sig", "replace")
    except OSError as e:
        raise SetupError(f"--overrides {path} could not be read: {e.strerror or e}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows or [norm(h) for h in rows[0][:4]] != ["student", "task", "points", "comment"]:
        raise SetupError(f"--overrides {path} must start with the header student,task,points,comment")
    out = []
    for n, r in enumerate(rows[1:], 2):
        r = (r + [""] * 4)[:4]
        student, task, points, comment = (c.strip() for c in r)
        if not student or not task:
            raise SetupError(f"--overrides {path}, line {n}: a student and a task id are needed")
        try:
            value = float(points) if points else None
        except ValueError:
            raise SetupError(f"--overrides {path}, line {n}: points {points!r} is not a number") from None
        if value is not None and not value >= 0:
            raise SetupError(f"--overrides {path}, line {n}: points must be >= 0")
        out.append((student, task, value, comment))
    return out
