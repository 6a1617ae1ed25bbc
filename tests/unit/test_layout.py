"""The suite's layout says what each test costs (tests/conftest.py): unit tests start no process.

tests/unit/conftest.py refuses a process while a unit test runs; this lint refuses, before
anything runs, a unit test file that imports what starts one.
"""
import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
# Modules and names that start processes: worker ranks, shells, interpreters.
STARTS_PROCESSES = {"subprocess", "multiprocessing", "concurrent.futures.process", "pty",
                    "milktea.distributed.launch", "milktea.distributed.compare",
                    "milktea.grade.sandbox", "milktea.grade.classroom", "nbclient"}
NAMES = {"launch", "compare", "grade_class", "run_in_sandbox", "Popen"}


def process_imports(source: str) -> list[str]:
    """The imports in `source` that start processes, as 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in STARTS_PROCESSES or a.name.split(".")[0] in {"subprocess", "multiprocessing"}:
                    found.append(f"line {node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in STARTS_PROCESSES or node.module.split(".")[0] in {"subprocess", "multiprocessing"}:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif node.module.startswith("milktea") and {a.name for a in node.names} & NAMES:
                names = sorted({a.name for a in node.names} & NAMES)
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(names)}")
    return found


@pytest.mark.parametrize("path", sorted((TESTS / "unit").glob("test_*.py")), ids=lambda p: p.name)
def test_unit_tests_import_nothing_that_starts_a_process(path):
    found = process_imports(path.read_text(encoding="utf-8"))
    assert not found, (f"tests/unit/{path.name} imports what starts processes ({'; '.join(found)}): "
                       "move those tests to tests/integration/")


def test_the_lint_sees_each_way_in():
    assert process_imports("import subprocess\nfrom multiprocessing import Pool\n"
                           "from milktea.distributed import launch\nimport milktea.distributed.compare\n") == [
        "line 1: import subprocess", "line 2: from multiprocessing import ...",
        "line 3: from milktea.distributed import launch", "line 4: import milktea.distributed.compare"]
    assert process_imports("import torch\nfrom milktea import TopK\n") == []


def test_every_test_file_sits_in_a_tier():
    stray = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not stray, f"tests/{stray}: move into tests/unit, tests/integration or tests/course"
    for tier in ("unit", "integration", "course"):
        assert list((TESTS / tier).glob("test_*.py")), f"tests/{tier} has no tests"
