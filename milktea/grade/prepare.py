"""Everything the grader computes once per exercise, in its own process, before any student.

`prepare(chapter, solutions_dir, hidden_dir, seed)` loads the reference functions from the
solution notebook (trusted code, executed here), builds the cases of every task (public ones
from milktea.grade.public, hidden ones from the instructor's directory) with one seed for the
whole class, and computes the expected outputs. Students' code never runs here.

A hidden-test file is `<hidden_dir>/<chapter>.py` (e.g. `03_topk.py`) defining

    CASES = {"03.1": [Case("label", (x, k)), ...],     # a list of Case
             "03.2": lambda rng, ref: [...]}             # or a function of (rng, reference)

where `Case` comes from `milktea.grade.spec`.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import types
import zlib
from dataclasses import dataclass, field

import numpy as np

from .child import decode, encode
from .notebook import NotebookError, cell_tasks, parse_notebook
from .public import CHAPTERS
from .spec import Case, Task


class SetupError(RuntimeError):
    """The grader itself is misconfigured (solutions, hidden tests): nothing was graded."""


@dataclass
class PreparedTask:
    task: Task
    cases: list          # [Case], public first
    public: int          # how many of `cases` are public
    expected: list       # reference outputs, as plain data decoded back (like a student's)
    encoded: list        # [{"args": ..., "kwargs": ...}] ready for the child


@dataclass
class Chapter:
    name: str
    tasks: list = field(default_factory=list)   # [PreparedTask]
    seed: int = 0
    inputs: dict = field(default_factory=dict)  # file -> sha256 of the bytes read (solution, hidden tests)

    @property
    def points(self) -> float:
        return sum(p.task.points for p in self.tasks)


def _read_once(path: str) -> tuple[bytes, str]:
    """A trusted input's bytes, read once (never again from disk), and their sha256."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SetupError(f"{path} could not be read: {e.strerror or e}") from None
    return raw, hashlib.sha256(raw).hexdigest()


def load_reference(solutions_dir: str, chapter: str, inputs: dict | None = None) -> dict:
    """The solution notebook's graded functions, by name. `inputs` collects {path: sha256}."""
    path = os.path.join(solutions_dir, chapter + ".ipynb")
    if not os.path.exists(path):
        raise SetupError(f"no solution notebook {path}: pass --solutions DIR (the folder with {chapter}.ipynb)")
    raw, digest = _read_once(path)
    if inputs is not None:
        inputs[os.path.abspath(path)] = digest
    try:
        nb = parse_notebook(raw, path)
    except NotebookError as e:
        raise SetupError(str(e)) from None
    ns: dict = {"__name__": f"solution_{chapter}"}
    for cell in nb["cells"]:
        if cell_tasks(cell):
            exec(compile(cell["source"], f"{path}:{cell.get('id', '?')}", "exec"), ns)
    missing = [t.function for t in CHAPTERS[chapter] if not callable(ns.get(t.function))]
    if missing:
        raise SetupError(f"{path} does not define {', '.join(missing)}")
    return ns


def load_hidden(hidden_dir: str | None, chapter: str, inputs: dict | None = None) -> dict:
    if not hidden_dir:
        return {}
    path = os.path.join(hidden_dir, chapter + ".py")
    if not os.path.exists(path):
        return {}
    raw, digest = _read_once(path)
    if inputs is not None:
        inputs[os.path.abspath(path)] = digest
    module = types.ModuleType(f"hidden_{chapter}")
    module.__file__ = path
    exec(compile(raw, path, "exec"), module.__dict__)
    cases = getattr(module, "CASES", None)
    known = {t.id for t in CHAPTERS[chapter]}
    if not isinstance(cases, dict) or not set(cases) <= known:
        raise SetupError(f"{path} must define CASES = {{task id: [Case, ...]}} with task ids among {sorted(known)}")
    return cases


def _as_case(c, where) -> Case:
    if isinstance(c, Case):
        return c
    if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], tuple):
        return Case(c[0], c[1])
    raise SetupError(f"{where}: a case must be Case(label, args) or (label, args), got {c!r}")


def task_rng(seed: int, task_id: str, hidden: bool = False) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(task_id.encode()), int(hidden)])


def prepare(chapter: str, solutions_dir: str, hidden_dir: str | None = None, seed: int = 0) -> Chapter:
    if chapter not in CHAPTERS:
        raise SetupError(f"unknown exercise {chapter!r}; known: {', '.join(CHAPTERS)}")
    out = Chapter(chapter, seed=seed)
    ref = load_reference(solutions_dir, chapter, out.inputs)
    hidden = load_hidden(hidden_dir, chapter, out.inputs)
    for task in CHAPTERS[chapter]:
        cases = [_as_case(c, task.id) for c in task.cases(task_rng(seed, task.id), ref)]
        extra = hidden.get(task.id, [])
        extra = extra(task_rng(seed, task.id, True), ref) if callable(extra) else extra
        extra = [_as_case(c, f"hidden {task.id}") for c in extra]
        expected, encoded = [], []
        for case in cases + extra:
            try:
                value = ref[task.function](*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
                expected.append(decode(encode(value)))
                encoded.append({"args": encode(list(case.args)),
                                "kwargs": encode(case.kwargs) if case.kwargs else None})
            except Exception as e:
                raise SetupError(f"the reference {task.function} fails on case {case.label!r} of task "
                                 f"{task.id}: {type(e).__name__}: {e}") from e
        out.tasks.append(PreparedTask(task, cases + extra, len(cases), expected, encoded))
    return out


def fingerprint(chapter: Chapter) -> str:
    """Changes whenever the cases or expected outputs change (for resuming a class run)."""
    h = hashlib.sha256(chapter.name.encode())
    for p in chapter.tasks:
        h.update(json.dumps([p.task.id, p.task.points, p.public, p.encoded, encode(p.expected)]).encode())
    return h.hexdigest()[:16]
