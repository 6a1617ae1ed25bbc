"""The public checks a release ships: what a learner's `check` needs, and no solution.

`NAME.checks.json` sits beside the student notebook. It holds the tests file without its
hidden regions (for the comparators), and for every task its public cases drawn with the
assignment's SEED, each with the reference's expected output: the value itself, or, for a
task with `reveal=False`, only a salted hash of it rounded to `digits` significant digits.

    >>> Hashed.of(1.0000001, 6, "salt") == Hashed.of(1.0, 6, "salt")
    True
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from ..i18n import _
from .assignment import (Assignment, SetupError, allowed_modules, read_trusted, run_tests_file, strip_hidden,
                         tasks_of)
from .wire import decode, encode
from .prepare import Prepared, PreparedTask, prepare
from .spec import Case

FORMAT = 1
SUFFIX = ".checks.json"
MAX_BYTES = 64 << 20


def _canonical(value, digits: int):
    """Plain data where numbers are rounded to `digits` significant digits (3 and 3.0 agree)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        return f"{v:.{digits}g}" if np.isfinite(v) else repr(v)
    if isinstance(value, np.ndarray):
        flat = value.ravel()
        items = [_canonical(v, digits) for v in (flat.tolist() if flat.dtype.kind in "biuf" else [])]
        return {"shape": list(value.shape), "kind": value.dtype.kind, "values": items}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, digits) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v, digits) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return repr(value)


@dataclass(frozen=True)
class Hashed:
    """An expected output a learner may not see: only its hash travels."""
    digest: str
    digits: int
    salt: str

    @classmethod
    def of(cls, value, digits: int, salt: str) -> "Hashed":
        text = json.dumps(_canonical(value, digits), sort_keys=True)
        return cls(hashlib.sha256((salt + "\n" + text).encode()).hexdigest(), digits, salt)

    def matches(self, value) -> bool:
        try:
            return Hashed.of(value, self.digits, self.salt).digest == self.digest
        except (TypeError, ValueError, OverflowError):
            return False


def compare_hashed(expected: Hashed, got) -> str | None:
    if expected.matches(got):
        return None
    return _("not the expected answer (this task's answers are not shown; values are compared "
             "to {digits} significant digits here, with the task's tolerance when graded)").format(digits=expected.digits)


def build(a: Assignment) -> dict:
    """The checks file's data (one file serves every language of the assignment)."""
    p = prepare(a, a.seed, public_only=True)
    tasks = []
    for pt in p.tasks:
        t = pt.task
        cases = []
        for i, (case, value) in enumerate(zip(pt.cases, pt.expected)):
            entry = {"label": case.label, **pt.encoded[i]}
            if t.reveal:
                entry["expected"] = encode(value)
            else:
                salt = f"{a.name}/{t.id}/{i}"
                entry["hash"] = Hashed.of(value, t.digits, salt).digest
            cases.append(entry)
        tasks.append({"id": t.id, "function": t.function, "points": t.points, "params": list(t.params),
                      "reveal": t.reveal, "digits": t.digits, "cases": cases})
    titles = {lang: {t.id: a.title(t.id, lang) for t in a.tasks} for lang in a.notebooks}
    return {"format": FORMAT, "assignment": a.name, "seed": a.seed, "titles": titles,
            "tests": strip_hidden(a.source, a.tests), "tasks": tasks}


def text(data: dict) -> str:
    return json.dumps(data, indent=0, sort_keys=True, ensure_ascii=False) + "\n"


def load(path: str) -> dict:
    raw = read_trusted(path, MAX_BYTES)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SetupError(f"{path} is not a checks file (not valid JSON)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("tasks"), list):
        raise SetupError(f"{path} is not a checks file of format {FORMAT}: rebuild the release "
                         "with this version of milktea")
    return data


def prepared(data: dict, path: str = "checks") -> Prepared:
    """A Prepared assignment from a checks file: the cases and expected outputs it ships, the
    comparators from its tests code. Nothing here needs the master notebook."""
    names = run_tests_file(data["tests"], path + " (tests)")
    known = {t.id: t for t in tasks_of(names, path)}
    out = Prepared(data["assignment"], seed=data.get("seed", 0), titles=data.get("titles") or {},
                   allow=allowed_modules(names, path))
    for entry in data["tasks"]:
        task = known.get(entry["id"])
        if task is None:
            raise SetupError(f"{path}: task {entry['id']} is not in its tests code")
        task.params = tuple(entry.get("params") or task.params)
        cases, expected, encoded = [], [], []
        for i, c in enumerate(entry["cases"]):
            enc = {"args": c["args"], "kwargs": c.get("kwargs")}
            cases.append(Case(c["label"], tuple(decode(c["args"])), decode(c["kwargs"]) if c.get("kwargs") else {}))
            encoded.append(enc)
            if "hash" in c:
                expected.append(Hashed(c["hash"], int(entry.get("digits", 6)), f"{data['assignment']}/{task.id}/{i}"))
            else:
                expected.append(decode(c["expected"]))
        out.tasks.append(PreparedTask(task, cases, len(cases), expected, encoded))
    return out


def same(old: dict, new: dict, path: str = "checks") -> bool:
    """Is a committed checks file up to date? The same cases, tests and titles, and expected
    values that the task's own comparison accepts (another machine's float rounding may differ)."""
    def bare(data):
        return {**data, "tasks": [{**t, "cases": [{k: v for k, v in c.items() if k != "expected"}
                                                  for c in t["cases"]]} for t in data.get("tasks", [])]}
    if bare(old) != bare(new):
        return False
    fresh = prepared(new, path)
    for o, pt in zip(old["tasks"], fresh.tasks):
        for c, case, want in zip(o["cases"], pt.cases, pt.expected):
            if isinstance(want, Hashed):
                continue
            try:
                if "expected" not in c or pt.task.compare(want, decode(c["expected"]), case.args) is not None:
                    return False
            except (ValueError, TypeError):
                return False
    return True


def find(notebook: str, name: str, given: str | None = None) -> str:
    """The checks file of `notebook`: `given`, else NAME.checks.json beside it or one folder up."""
    if given:
        return given
    here = os.path.dirname(os.path.abspath(notebook))
    for folder in (here, os.path.dirname(here), os.getcwd()):
        path = os.path.join(folder, name + SUFFIX)
        if os.path.isfile(path):
            return path
    raise SetupError(_("the public checks of {name} are missing: expected at {path} (the file comes with the "
                       "exercise: put it beside the notebook), or pass --checks FILE").format(
        name=name, path=os.path.join(here, name + SUFFIX)))
