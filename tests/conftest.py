"""Shared test set-up: headless plotting, a sane thread count, the repo root, timings."""
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the tests run against this checkout, installed or not
    sys.path.insert(0, str(ROOT))

os.environ["MPLBACKEND"] = "Agg"  # no window may open during a test

# Property tests draw the same examples on every run, so a failure in CI is a bug that
# reproduces, never bad luck. To search for new failing examples locally:
#   HYPOTHESIS_PROFILE=explore python -m pytest tests/test_wire_fuzz.py
try:
    from hypothesis import settings as _hypothesis_settings
    _hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
except ImportError:
    pass


_WALL_TIMES = pytest.StashKey[dict]()


def pytest_configure(config):
    config.stash[_WALL_TIMES] = {}
    try:
        import torch
    except ImportError:
        return
    # More threads than usable cores only adds contention on a small shared machine.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), cores or 1, 8)))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def wall_times(pytestconfig) -> dict:
    """{section: {name: seconds}}, printed at the end of the run."""
    return pytestconfig.stash[_WALL_TIMES]


def pytest_terminal_summary(terminalreporter, config):
    recorded = {k: v for k, v in config.stash.get(_WALL_TIMES, {}).items() if v}
    if recorded:  # also kept for comparing runs: results/wall_times.json
        (ROOT / "results").mkdir(exist_ok=True)
        (ROOT / "results" / "wall_times.json").write_text(json.dumps(recorded, indent=1))
    for section, times in recorded.items():
        if not times:
            continue
        terminalreporter.section(f"{section}: wall time")
        for name, sec in times.items():
            terminalreporter.write_line(f"{sec:8.1f} s  {name}")
        if len(times) > 1 and not section.startswith("slowest"):
            terminalreporter.write_line(f"{sum(times.values()):8.1f} s  total")
