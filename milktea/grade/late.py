"""A late policy: which submissions were late, by how much, and what that costs.

Lateness comes from the LMS download (Canvas marks a late file `_LATE_`, which says late but
not by how much; Gradescope's submission_metadata.yml gives each submission's time, compared
with `--due`) or from submission times (`--submitted times.csv` with `student,submitted`
rows, as an LMS export gives them, and `--due`). The rule comes from the command line:

    --late-penalty 10%            10% of the student's score for any late submission
    --late-penalty 10%/day        10% per started day late (a `_LATE_` marker alone: one day)
    --late-penalty 10%/day,max=50%

The penalty is taken off the total, after the instructor's overrides; an overrides row with the
task `late` replaces it for that student (`s07,late,0,extension granted` waives it).

    >>> rule = Rule.parse("10%/day,max=25%")
    >>> rule.penalty(8.0, 1.5), rule.penalty(8.0, True), rule.penalty(8.0, 7)
    (1.6, 0.8, 2.0)
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from .assignment import SetupError

_RULE = re.compile(r"^\s*(?P<pct>\d+(?:\.\d+)?)\s*%\s*(?P<day>/\s*day)?\s*(?:,\s*max\s*=\s*(?P<cap>\d+(?:\.\d+)?)\s*%)?\s*$")


@dataclass(frozen=True)
class Rule:
    percent: float           # of the student's score
    per_day: bool = False    # per started day late
    cap: float = 100.0       # the most a penalty may take, in percent

    @classmethod
    def parse(cls, text: str) -> "Rule":
        m = _RULE.match(text or "")
        if not m:
            raise SetupError(f"--late-penalty {text!r}: write P% (for any late submission), P%/day (per started "
                             "day late) or P%/day,max=Q% (e.g. 10%/day,max=50%)")
        rule = cls(float(m["pct"]), bool(m["day"]), float(m["cap"]) if m["cap"] else 100.0)
        if rule.percent > 100 or rule.cap > 100:
            raise SetupError(f"--late-penalty {text!r}: a percentage above 100")
        return rule

    def penalty(self, score: float, late) -> float:
        """Points taken off `score` for lateness `late` (True: late by an unknown time; a
        number: days late; None or <= 0: on time)."""
        if late is None or late is False or (late is not True and late <= 0):
            return 0.0
        days = 1 if late is True else math.ceil(late - 1e-9)
        pct = min(self.cap, self.percent * (days if self.per_day else 1))
        return round(score * pct / 100, 2)

    def __str__(self) -> str:
        return f"{self.percent:g}%" + ("/day" if self.per_day else "") + (f",max={self.cap:g}%" if self.cap < 100 else "")


# ISO 8601 as people and LMS exports write it: Gradescope's "2026-12-01 23:10:11.123456789 -08:00"
_TIME = re.compile(r"^\s*(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d(?::\d\d)?)(?:\.(\d+))?\s*(Z|UTC|[+-]\d\d:?\d\d)?\s*$")


def _when(text: str, where: str) -> datetime:
    m = _TIME.match(text or "")
    try:
        if not m:
            raise ValueError
        zone = {"Z": "+00:00", "UTC": "+00:00", None: ""}.get(m[4], m[4])
        zone = zone if ":" in zone or not zone else zone[:3] + ":" + zone[3:]
        t = datetime.fromisoformat(f"{m[1]}T{m[2]}" + (f".{m[3][:6]:0<6}" if m[3] else "") + zone)
    except ValueError:
        raise SetupError(f"{where}: {text!r} is not a date and time (write 2026-12-01T23:59, with +01:00 if "
                         "you want a time zone)") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def days_late(times_csv: str | None, due: str | None) -> dict:
    """{student: days late (<= 0 when on time)} from a CSV of submission times and the due date."""
    if not times_csv:
        return {}
    if not due:
        raise SetupError("--submitted needs --due (the due date, e.g. 2026-12-01T23:59)")
    deadline = _when(due, "--due")
    try:
        with open(times_csv, "rb") as f:
            text = f.read(8 << 20).decode("utf-8-sig", "replace")
    except OSError as e:
        raise SetupError(f"--submitted {times_csv} could not be read: {e.strerror or e}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    if not rows or [c.strip().lower() for c in rows[0][:2]] != ["student", "submitted"]:
        raise SetupError(f"--submitted {times_csv} must start with the header student,submitted")
    out = {}
    for n, r in enumerate(rows[1:], 2):
        if len(r) < 2 or not r[0].strip():
            raise SetupError(f"--submitted {times_csv}, line {n}: a student and a time are needed")
        out[r[0].strip()] = (_when(r[1], f"--submitted {times_csv}, line {n}") - deadline).total_seconds() / 86400
    return out


def days_after(when: str, due: str | None, where: str) -> float | None:
    """Days from `due` to `when` (an LMS's submission time; <= 0 when on time), or None
    when either is missing.

        >>> days_after("2026-12-02 03:59:00.000000000 -08:00", "2026-12-01T23:59", "x")
        0.5
    """
    if not when or not due:
        return None
    return (_when(when, where) - _when(due, "--due")).total_seconds() / 86400


def merge(a, b):
    """The lateness of two submissions of one student: the later of the two."""
    if a is None or b is None:
        return b if a is None else a
    if a is True or b is True:
        return max(a if a is not True else 1, b if b is not True else 1) if (a is not True or b is not True) else True
    return max(a, b)


def describe(late) -> str:
    """The lateness as the table shows it: days (one decimal), 'yes' when only a marker says so."""
    if late is True:
        return "yes"
    return f"{late:.1f} days" if late and late > 0 else ""
