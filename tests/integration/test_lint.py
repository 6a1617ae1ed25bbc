"""`ruff check` is clean over the whole repository (library, tests, tools and notebooks).

The rules (pyproject.toml, [tool.ruff]) catch bugs, not style: undefined or unused names,
a closure over a loop variable, a mutable default argument, a lost exception context.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401  (the pip package, in the test extra)
        return [sys.executable, "-m", "ruff"]
    except ImportError:
        if shutil.which("ruff"):
            return ["ruff"]
    pytest.skip("ruff is not installed: pip install -e '.[test]' (or pip install ruff)")


def test_ruff_check_is_clean():
    out = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"ruff check found problems (fix them, or run `ruff check --fix .`):\n" \
        f"{out.stdout}{out.stderr}"


def test_ruff_sees_the_distributed_package():
    # milktea/distributed used to be milktea/dist, a name ruff and pytest skip by default
    out = subprocess.run([*_ruff(), "check", "--show-files", "."], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    files = {Path(line).resolve() for line in out.stdout.splitlines() if line.strip()}
    for must in ("milktea/distributed/launch.py", "tests/integration/test_lint.py", "tools/import_time.py",
                 "notebooks/01_bottleneck.ipynb"):
        if (ROOT / must).exists():
            assert (ROOT / must).resolve() in files, f"ruff does not check {must}"
