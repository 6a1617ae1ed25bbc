"""A wrong answer never passes, and a right one written another way always does.

For every graded task of the course, tests/wrong_answers.py keeps at least three plausible wrong
answers; each must fail at least one of the task's public cases (so the learner's own check
already says so), and the master's answer, and the other right answers kept there, must pass
every public and hidden case. Judged in this process, as the grader judges a learner's values:
through the task's harness, the values passed through the grader's plain-data encoding, and the
task's comparator. (End to end, in a sandboxed child: tests/course/test_grade_exercises.py and
tests/integration/test_hook_task.py, which also runs 06.7's hooks in a real DDP step.)
"""
import copy
import functools

import pytest

from _grade_helpers import CHAPTERS, load
from milktea.grade.assignment import reference
from milktea.grade.child import decode, encode
from milktea.grade.prepare import expected_of, task_rng
from wrong_answers import RIGHT, WRONG

SEED = 5
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # some wrong answers divide by zero


def _harness_names(task):
    """The harness of a task, with 06.7's one real DDP step marked as passed: this file checks
    values in-process and fast; the real step runs in tests/integration/test_hook_task.py."""
    if not task.harness:
        return None
    names = {"__name__": "__harness__"}
    exec(compile(task.harness, f"<harness of {task.id}>", "exec"), names)
    if "_DDP" in names:
        names["_DDP"]["verdict"] = ""
    return names


def _through(task, fn):
    names = _harness_names(task)
    return fn if names is None else (lambda *a, **k: names["run"](fn, *a, **k))


@functools.lru_cache(maxsize=None)
def _chapter(chapter):
    """{task id: (task, [(case, expected, public)])} and the master's namespace."""
    a = load(chapter)
    ref = reference(a)
    out = {}
    for task in a.tasks:
        public = task.cases(task_rng(SEED, task.id), ref)
        hidden = a.hidden.get(task.id, [])
        hidden = hidden(task_rng(SEED, task.id, True), ref) if callable(hidden) else list(hidden)
        call = _through(task, ref[task.function])
        cases = [(c, p) for p, group in ((True, public), (False, hidden)) for c in group if not c.kwargs.get("ddp")]
        out[task.id] = (task, [(c, expected_of(task, ref, c, call), p) for c, p in cases])
    return out, ref


def _task(task_id):
    chapter = next(c for c in CHAPTERS if c.startswith(task_id.split(".")[0] + "_"))
    tasks, ref = _chapter(chapter)
    return tasks[task_id], ref


def _judge(task_id, source):
    """[(case label, public, problem or None)] for a learner's graded cell `source`."""
    (task, cases), ref = _task(task_id)
    ns = dict(ref)   # the other tasks' master functions, as a learner's own cells would define them
    exec(compile(source, f"<answer to {task_id}>", "exec"), ns)
    call = _through(task, ns[task.function])
    verdicts = []
    for case, expected, public in cases:
        try:
            got = decode(encode(call(*copy.deepcopy(case.args), **copy.deepcopy(case.kwargs))))
            problem = task.compare(expected, got, case.args)
        except Exception as exc:  # noqa: BLE001 - an answer that raises loses the case
            problem = f"raised {type(exc).__name__}: {exc}"
        verdicts.append((case.label, public, problem))
    return verdicts


ALL_TASKS = [t.id for ch in CHAPTERS for t in load(ch).tasks]


def test_every_task_keeps_three_wrong_answers():
    short = [t for t in ALL_TASKS if len(WRONG.get(t, ())) < 3]
    assert not short, f"tests/wrong_answers.py: give tasks {', '.join(short)} at least three plausible wrong answers"
    assert not set(WRONG) - set(ALL_TASKS), f"wrong answers for tasks that do not exist: {sorted(set(WRONG) - set(ALL_TASKS))}"


WRONG_CASES = [(t, i) for t in sorted(WRONG) for i in range(len(WRONG[t]))]


@pytest.mark.parametrize("task_id,i", WRONG_CASES, ids=[f"{t}-{WRONG[t][i][0]}" for t, i in WRONG_CASES])
def test_a_wrong_answer_fails_a_public_case(task_id, i):
    what, source = WRONG[task_id][i]
    failed = [(label, problem) for label, public, problem in _judge(task_id, source) if public and problem]
    assert failed, f"{task_id}: the wrong answer '{what}' passes every public case"


@pytest.mark.parametrize("task_id", sorted(RIGHT))
def test_a_right_answer_written_another_way_passes(task_id):
    failed = [(label, problem) for label, _public, problem in _judge(task_id, RIGHT[task_id]) if problem]
    assert not failed, failed


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_master_passes_every_case(chapter):
    a = load(chapter)
    for task in a.tasks:
        cell = next(c for c in a.notebooks[a.lang]["cells"] if f"task:{task.id}" in c.get("metadata", {}).get("tags", []))
        failed = [(label, problem) for label, _public, problem in _judge(task.id, cell["source"]) if problem]
        assert not failed, (task.id, failed)
