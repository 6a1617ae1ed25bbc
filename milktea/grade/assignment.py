"""An assignment: one master notebook and one tests file beside it, in any folder.

    hw/                                   (any folder outside the library)
      03_topk.ipynb                       the master: graded cells tagged `graded` and `task:<id>`,
                                          solution lines between ### BEGIN/END SOLUTION
      03_topk.tests.py                    the tests: TASKS (public), HIDDEN (between markers)
      zh/03_topk.ipynb                    a translation (optional): same cells, its own words

The tests file is trusted Python, run in the grader's process (never in a student's):

    from milktea.grade.spec import Case, Task, number

    def _cases(rng, ref):                 # fixed edge cases, then random ones from rng
        return [Case("two workers", (1000, 4, 2))] + [Case("random", (int(rng.integers(1, 99)), 4, 8))]

    TASKS = [Task("01.1", "ring_bytes", 2, _cases, number(rtol=1e-9))]

    ### BEGIN HIDDEN TESTS
    HIDDEN = {"01.1": lambda rng, ref: [Case("one worker", (10, 4, 1))]}
    ### END HIDDEN TESTS

Optional names: SEED (the seed of the public checks a release ships, default 0). A task's title
is the heading above its cell (`## Task 01.1 · Bytes on the wire (2 points)` gives "Bytes on
the wire"; a number in the closing brackets must equal the task's points), in each language of
the notebook. The release leaves everything between the hidden-test markers out of what
students get.

    >>> strip_hidden("A = 1\\n### BEGIN HIDDEN TESTS\\nB = 2\\n### END HIDDEN TESTS\\n")
    'A = 1\\n'
"""
from __future__ import annotations

import hashlib
import inspect
import os
import re
import types
from dataclasses import dataclass, field

from .notebook import NotebookError, cell_tasks, parse_notebook
from .spec import Task

TESTS_SUFFIX = ".tests.py"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
TRANSLATIONS = ("zh",)          # sub-folders of an assignment folder holding translated masters
MAX_TESTS_BYTES = 4 << 20


class SetupError(RuntimeError):
    """The grader itself is misconfigured (masters, tests files, hidden tests): nothing was graded."""


@dataclass
class Assignment:
    name: str                 # "03_topk": the master's file name without .ipynb
    master: str               # path of the master notebook
    tests: str                # path of the tests file
    tasks: list               # [Task], in the order of the notebook's graded cells
    hidden: dict              # task id -> [Case] or a function (rng, ref) -> [Case]
    seed: int = 0             # seed of the public checks shipped in a release
    lang: str = "en"          # the master's language
    titles: dict = field(default_factory=dict)     # language -> {task id: title}
    notebooks: dict = field(default_factory=dict)  # language -> parsed master notebook
    inputs: dict = field(default_factory=dict)     # path -> sha256 of the bytes read
    source: str = ""          # the tests file's text
    allow: tuple = ()         # ALLOW_MODULES: modules whose own code may use ctypes in a child (numba's way)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tasks)

    def title(self, task_id: str, lang: str | None = None) -> str:
        """The task's title in `lang` (the master's when that language has no notebook)."""
        titles = self.titles.get(lang) or self.titles[self.lang]
        return titles.get(task_id) or self.titles[self.lang][task_id]


def read_trusted(path: str, limit: int, inputs: dict | None = None) -> bytes:
    """A trusted input's bytes, read once (never again from disk); its sha256 goes to `inputs`."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise SetupError(f"{path} could not be read: {e.strerror or e}") from None
    if len(raw) > limit:
        raise SetupError(f"{path} is over {limit >> 20} MB")
    if inputs is not None:
        inputs[os.path.abspath(path)] = hashlib.sha256(raw).hexdigest()
    return raw


def strip_hidden(source: str, where: str = "the tests file") -> str:
    """The tests file without its hidden-test regions; ValueError on unbalanced markers."""
    out, inside = [], False
    for n, line in enumerate(source.splitlines(True), 1):
        mark = line.strip()
        if mark == BEGIN_HIDDEN:
            if inside:
                raise ValueError(f"{where}, line {n}: {BEGIN_HIDDEN} inside another hidden region")
            inside = True
        elif mark == END_HIDDEN:
            if not inside:
                raise ValueError(f"{where}, line {n}: {END_HIDDEN} without {BEGIN_HIDDEN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: {BEGIN_HIDDEN} is never closed")
    return "".join(out)


def run_tests_file(source: str, path: str) -> dict:
    """Execute a tests file's text; its names. A syntax error or a crash is a SetupError."""
    module = types.ModuleType("milktea_tests_" + re.sub(r"\W", "_", os.path.basename(path)))
    module.__file__ = path
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except SyntaxError as e:
        raise SetupError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:
        raise SetupError(f"{path} failed when run: {type(e).__name__}: {e}") from e
    return module.__dict__


def allowed_modules(names: dict, path: str) -> tuple:
    """ALLOW_MODULES of a tests file: top-level module names whose own code may use native
    libraries through ctypes in a graded cell, as numba's does (numba and llvmlite always may)."""
    allow = names.get("ALLOW_MODULES", ())
    if isinstance(allow, str) or not isinstance(allow, (list, tuple)) or \
            not all(isinstance(m, str) and m.isidentifier() for m in allow):
        raise SetupError(f"{path}: ALLOW_MODULES must be a list of top-level module names, e.g. ['pyarrow']")
    return tuple(allow)


def tasks_of(names: dict, path: str) -> list:
    tasks = names.get("TASKS")
    if not isinstance(tasks, (list, tuple)) or not tasks or not all(isinstance(t, Task) for t in tasks):
        raise SetupError(f"{path} must define TASKS = [Task(...), ...] (Task from milktea.grade.spec)")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise SetupError(f"{path}: two tasks share the id {next(i for i in ids if ids.count(i) > 1)}")
    return list(tasks)


def tests_path(master: str) -> str:
    """Where the tests file of a master notebook is: beside it, or beside the master it translates."""
    folder, name = os.path.split(os.path.abspath(master))
    stem = name[:-len(".ipynb")]
    here = os.path.join(folder, stem + TESTS_SUFFIX)
    if os.path.basename(folder) in TRANSLATIONS and not os.path.exists(here):
        return os.path.join(os.path.dirname(folder), stem + TESTS_SUFFIX)
    return here


_POINTS = re.compile(r"\s*[(（]([^()（）]*)[)）]\s*$")


def heading_titles(nb: dict, path: str, tasks: list) -> dict:
    """{task id: title} from the heading above each task's graded cell. A number in the
    heading's closing brackets must equal the task's points."""
    points = {t.id: t.points for t in tasks}
    titles, heading = {}, ""
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            for line in cell["source"].splitlines():
                if line.lstrip().startswith("#"):
                    heading = line.strip().lstrip("#").strip()
            continue
        for tid in cell_tasks(cell):
            if tid not in points or not heading:
                continue
            title = heading
            m = _POINTS.search(title)
            if m:
                number = re.search(r"\d+(?:\.\d+)?", m.group(1))
                if number and float(number.group()) != float(points[tid]):
                    raise SetupError(f"{path}: the heading of task {tid} says {number.group()} points, "
                                     f"its tests file {points[tid]:g}: make them agree")
                title = title[:m.start()]
            title = re.sub(rf"^(?:\S+\s*)?{re.escape(tid)}\s*[·:.\-–—]?\s*", "", title).strip()
            titles[tid] = title or heading
    return titles


def _notebook(path: str, inputs: dict) -> dict:
    raw = read_trusted(path, 64 << 20, inputs)
    try:
        return parse_notebook(raw, path)
    except NotebookError as e:
        raise SetupError(str(e)) from None


def _language(nb: dict) -> str:
    meta = nb.get("metadata", {}).get("milktea", {})
    lang = meta.get("lang", "en") if isinstance(meta, dict) else "en"
    return lang if isinstance(lang, str) else "en"


def load(master: str) -> Assignment:
    """Read a master notebook, its tests file and its translations; check that they agree."""
    inputs: dict = {}
    if not master.endswith(".ipynb") or not os.path.isfile(master):
        raise SetupError(f"{master} is not a notebook file (NAME.ipynb)")
    nb = _notebook(master, inputs)
    name = os.path.basename(master)[:-len(".ipynb")]
    tests = tests_path(master)
    if not os.path.exists(tests):
        raise SetupError(f"{master} has no tests file: write {os.path.basename(tests)} beside it "
                         "(see docs/grading.md, 'Write an assignment')")
    source = read_trusted(tests, MAX_TESTS_BYTES, inputs).decode("utf-8", "replace")
    try:
        public = strip_hidden(source, tests)
    except ValueError as e:
        raise SetupError(str(e)) from None
    names = run_tests_file(source, tests)
    tasks = tasks_of(names, tests)
    if "HIDDEN" in run_tests_file(public, tests):
        raise SetupError(f"{tests}: HIDDEN must sit between {BEGIN_HIDDEN} and {END_HIDDEN}, "
                         "so that a release leaves it out")
    hidden = names.get("HIDDEN", {})
    if not isinstance(hidden, dict) or not set(hidden) <= {t.id for t in tasks}:
        raise SetupError(f"{tests}: HIDDEN must be {{task id: [Case, ...] or a function (rng, ref)}} "
                         f"with ids among {', '.join(t.id for t in tasks)}")
    allow = allowed_modules(names, tests)
    seed = names.get("SEED", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SetupError(f"{tests}: SEED must be an int >= 0")
    tagged = [tid for c in nb["cells"] for tid in cell_tasks(c)]
    for t in tasks:
        if tagged.count(t.id) != 1:
            raise SetupError(f"{master} must have exactly one code cell tagged 'graded' and 'task:{t.id}' "
                             f"(found {tagged.count(t.id)})")
    extra = sorted(set(tagged) - {t.id for t in tasks})
    if extra:
        raise SetupError(f"{master} tags cells with task:{', task:'.join(extra)}, which {tests} does not define")
    tasks.sort(key=lambda t: tagged.index(t.id))
    lang = _language(nb)
    out = Assignment(name, master, tests, tasks, hidden, seed, lang, {lang: heading_titles(nb, master, tasks)},
                     {lang: nb}, inputs, source, allow)
    folder = os.path.dirname(os.path.abspath(master))
    for sub in TRANSLATIONS:
        path = os.path.join(folder, sub, name + ".ipynb")
        if os.path.isfile(path):
            other = _notebook(path, inputs)
            theirs = [tid for c in other["cells"] for tid in cell_tasks(c)]
            if theirs != [t.id for t in tasks]:
                raise SetupError(f"{path} tags tasks {theirs}, its master {master} {[t.id for t in tasks]}")
            out.titles[sub] = heading_titles(other, path, tasks)
            out.notebooks[sub] = other
    for t in tasks:
        out.titles[lang].setdefault(t.id, t.title or t.function)
    return out


def reference(a: Assignment) -> dict:
    """The master's graded functions, by name (trusted code, run in this process)."""
    ns: dict = {"__name__": f"solution_{a.name}"}
    for cell in a.notebooks[a.lang]["cells"]:
        if cell_tasks(cell):
            try:
                exec(compile(cell["source"], f"{a.master}:{cell.get('id', '?')}", "exec"), ns)
            except Exception as e:
                raise SetupError(f"{a.master}: a graded cell fails when run: {type(e).__name__}: {e}") from e
    missing = [t.function for t in a.tasks if not callable(ns.get(t.function))]
    if missing:
        raise SetupError(f"{a.master} does not define {', '.join(missing)}")
    for t in a.tasks:
        if not t.params:
            try:
                t.params = tuple(inspect.signature(ns[t.function]).parameters)
            except (TypeError, ValueError):
                pass
    return ns


def find(folder: str, only=None) -> dict:
    """{name: Assignment} for every master notebook in `folder` (a notebook with graded cells;
    translations live in its sub-folders). `only`: names to keep; each must exist."""
    if not os.path.isdir(folder):
        raise SetupError(f"{folder} is not a folder of master notebooks: pass --solutions DIR "
                         "(the folder with NAME.ipynb and NAME.tests.py)")
    found = {}
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if not entry.endswith(".ipynb") or entry.startswith(".") or not os.path.isfile(path):
            continue
        name = entry[:-len(".ipynb")]
        if only and name not in only:
            continue
        if not os.path.exists(tests_path(path)):
            if _has_graded_cells(path):
                raise SetupError(f"{path} has graded cells but no tests file {name + TESTS_SUFFIX} beside it")
            continue
        found[name] = load(path)
    missing = sorted(set(only or ()) - set(found))
    if missing:
        known = ", ".join(sorted(found)) or "none"
        raise SetupError(f"no assignment {', '.join(missing)} in {folder} (found: {known})")
    if not found:
        raise SetupError(f"{folder} holds no assignment (a NAME.ipynb with NAME.tests.py beside it)")
    return found


def names(folder: str) -> list:
    """The names of the assignments in `folder` (masters with a tests file), without loading them."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return []
    return [e[:-len(".ipynb")] for e in entries if e.endswith(".ipynb") and not e.startswith(".")
            and os.path.exists(tests_path(os.path.join(folder, e)))]


def _has_graded_cells(path: str) -> bool:
    try:
        nb = _notebook(path, {})
    except SetupError:
        return False
    return any(cell_tasks(c) for c in nb["cells"])
