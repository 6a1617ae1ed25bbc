"""Everything the grader computes once per assignment, in its own process, before any student.

`prepare(assignment, seed, hidden_dir)` loads the reference functions from the master notebook
(trusted code, executed here), builds the cases of every task with one seed for the whole
class (public ones from the tests file's TASKS, hidden ones from its HIDDEN and from the
instructor's `hidden_dir`), and computes the expected outputs. Students' code never runs here.

A file in `hidden_dir` is `<hidden_dir>/<assignment>.py` (e.g. `03_topk.py`) defining

    CASES = {"03.1": [Case("label", (x, k)), ...],     # a list of Case
             "03.2": lambda rng, ref: [...]}             # or a function of (rng, reference)

where `Case` comes from `milktea.grade.spec`. `check_hidden_dir` checks the whole folder
before anything is graded.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from .assignment import Assignment, SetupError, read_trusted, reference, run_tests_file
from .wire import decode, encode
from .spec import Case, Task

__all__ = ["SetupError", "Prepared", "PreparedTask", "prepare", "fingerprint", "check_hidden_dir"]


@dataclass
class PreparedTask:
    task: Task
    cases: list          # [Case], public first
    public: int          # how many of `cases` are public
    expected: list       # reference outputs, as plain data decoded back (like a student's)
    encoded: list        # [{"args": ..., "kwargs": ...}] ready for the child


@dataclass
class Prepared:
    name: str
    tasks: list = field(default_factory=list)   # [PreparedTask]
    seed: int = 0
    inputs: dict = field(default_factory=dict)  # file -> sha256 of the bytes read (master, tests, hidden)
    titles: dict = field(default_factory=dict)  # language -> {task id: title}
    allow: tuple = ()                           # modules whose own code may use ctypes (assignment.allowed_modules)

    @property
    def points(self) -> float:
        return sum(p.task.points for p in self.tasks)

    def title(self, task_id: str, lang: str = "en") -> str:
        own = self.titles.get(lang) or next(iter(self.titles.values()), {})
        return own.get(task_id) or next((t for d in self.titles.values() for k, t in d.items() if k == task_id),
                                        task_id)


def check_hidden_dir(hidden_dir: str | None, names) -> dict:
    """{assignment: path} of every hidden-test file, checked before any student is graded: the
    folder exists and holds at least one file, every .py in it is named after an assignment,
    and each one runs and defines CASES (or HIDDEN)."""
    if hidden_dir is None:
        return {}
    if not os.path.isdir(hidden_dir):
        raise SetupError(f"--hidden {hidden_dir}: no such folder (a folder of <assignment>.py files)")
    files = sorted(e for e in os.listdir(hidden_dir) if e.endswith(".py") and not e.startswith("."))
    if not files:
        raise SetupError(f"--hidden {hidden_dir} holds no <assignment>.py file: nothing hidden would be graded")
    out = {}
    for entry in files:
        name = entry[:-3]
        if name not in names:
            raise SetupError(f"{os.path.join(hidden_dir, entry)} is named after no assignment "
                             f"(known: {', '.join(sorted(names))}); rename it <assignment>.py")
        path = out[name] = os.path.join(hidden_dir, entry)
        try:
            compile(read_trusted(path, 4 << 20), path, "exec")
        except SyntaxError as e:
            raise SetupError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    return out


def load_hidden(path: str | None, a: Assignment, inputs: dict | None = None) -> dict:
    if not path:
        return {}
    raw = read_trusted(path, 4 << 20, inputs)
    names = run_tests_file(raw.decode("utf-8", "replace"), path)
    cases = names.get("CASES", names.get("HIDDEN"))
    known = {t.id for t in a.tasks}
    if not isinstance(cases, dict) or not set(cases) <= known:
        raise SetupError(f"{path} must define CASES = {{task id: [Case, ...]}} with task ids among "
                         f"{', '.join(sorted(known))}")
    return cases


def _as_case(c, where) -> Case:
    if isinstance(c, Case):
        return c
    if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], tuple):
        return Case(c[0], c[1])
    raise SetupError(f"{where}: a case must be Case(label, args) or (label, args), got {c!r}")


def task_rng(seed: int, task_id: str, hidden: bool = False) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(task_id.encode()), int(hidden)])


def _cases(spec, rng, ref, where) -> list:
    try:
        made = spec(rng, ref) if callable(spec) else spec
        return [_as_case(c, where) for c in made]
    except SetupError:
        raise
    except Exception as e:
        raise SetupError(f"{where}: making the cases failed: {type(e).__name__}: {e}") from e


def harness(task: Task, fn):
    """`fn` as the grader calls it: through the task's harness, when it has one."""
    if not task.harness:
        return fn
    names = {"__name__": "__harness__"}
    try:
        exec(compile(task.harness, f"<harness of task {task.id}>", "exec"), names)
        run = names["run"]
    except Exception as e:
        raise SetupError(f"the harness of task {task.id} fails: {type(e).__name__}: {e} "
                         "(it must define run(fn, *args, **kwargs))") from e
    return lambda *args, **kwargs: run(fn, *args, **kwargs)


def expected_of(task: Task, ref: dict, case: Case, call=None):
    """The reference answer of one case, as plain data decoded back (what a child's would be)."""
    try:
        value = (call or ref[task.function])(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))
        return decode(encode(value))
    except Exception as e:
        raise SetupError(f"the reference {task.function} fails on case {case.label!r} of task "
                         f"{task.id}: {type(e).__name__}: {e}") from e


def encode_case(case: Case) -> dict:
    return {"args": encode(list(case.args)), "kwargs": encode(case.kwargs) if case.kwargs else None}


def prepare(a: Assignment, seed: int = 0, hidden_file: str | None = None, public_only: bool = False) -> Prepared:
    """Cases and expected outputs of every task for `seed`; `hidden_file`: the instructor's
    extra hidden tests for this assignment; `public_only`: leave every hidden case out."""
    out = Prepared(a.name, seed=seed, inputs=dict(a.inputs), titles=a.titles, allow=a.allow)
    ref = reference(a)
    extra = {} if public_only else load_hidden(hidden_file, a, out.inputs)
    for task in a.tasks:
        cases = _cases(task.cases, task_rng(seed, task.id), ref, f"{a.tests}: task {task.id}")
        hidden = [] if public_only else _cases(a.hidden.get(task.id, []), task_rng(seed, task.id, True), ref,
                                               f"{a.tests}: hidden tests of {task.id}")
        if extra.get(task.id):
            hidden += _cases(extra[task.id], task_rng(seed, task.id + "#extra", True), ref,
                             f"{hidden_file}: task {task.id}")
        if not cases:
            raise SetupError(f"{a.tests}: task {task.id} has no public case")
        call = harness(task, ref[task.function])
        expected = [expected_of(task, ref, c, call) for c in cases + hidden]
        out.tasks.append(PreparedTask(task, cases + hidden, len(cases), expected,
                                      [encode_case(c) for c in cases + hidden]))
    return out


def fingerprint(p: Prepared) -> str:
    """Changes whenever the cases or expected outputs change (for resuming a class run)."""
    h = hashlib.sha256(p.name.encode())
    for t in p.tasks:
        h.update(json.dumps([t.task.id, t.task.points, t.public, t.encoded, encode(t.expected)]).encode())
    return h.hexdigest()[:16]
