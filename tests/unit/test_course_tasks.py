"""Every graded task of the course asks for code the learner writes: the function the grader
calls holds a solution region in its master notebook (so nothing given in an editable cell is
what gets graded, as run_hook once was for 06.7), and a task that needs the grader's own
scaffolding (a fake bucket and group) brings it as a harness from its tests file."""
import ast

import pytest

from _grade_helpers import CHAPTERS, graded_cell, load
from milktea.grade.release import BEGIN


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_graded_function_is_the_learners_own_code(chapter):
    a = load(chapter)
    for task in a.tasks:
        source = graded_cell(a.notebooks[a.lang], task.id)["source"]
        defs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == task.function]
        assert len(defs) == 1, f"{task.id}: the graded cell must define {task.function} once"
        body = "\n".join(source.splitlines()[defs[0].lineno - 1:defs[0].end_lineno])
        assert BEGIN in body, \
            f"{task.id}: {task.function} has no solution region: the grader would call given code"
        if task.harness:
            assert "def run(" in task.harness and task.function not in source.replace(
                f"def {task.function}(", ""), f"{task.id}: the graded cell calls {task.function} itself"
