"""Shared test set-up: the three tiers, headless plotting, a sane thread count, timings.

The folder a test lives in says what it costs, and sets its marker:

    tests/unit/         in-process only: no process is started (checked while it runs)
    tests/integration/  starts processes: worker ranks, torchrun, sandboxed children, CLIs
    tests/course/       executes the course: notebooks, the browser, exercises end to end

`make test-fast` runs tests/unit; `make test` runs everything. Helper modules that tests
and worker processes import by name (dist_workers, compressor_zoo, ...) live in tests/.
"""
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TIERS = ("unit", "integration", "course")
for path in (TESTS, ROOT):   # this checkout, installed or not; tests/ for the helper modules
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

os.environ["MPLBACKEND"] = "Agg"  # no window may open during a test

# Property tests draw the same examples on every run, so a failure in CI is a bug that
# reproduces, never bad luck. To search for new failing examples locally:
#   HYPOTHESIS_PROFILE=explore python -m pytest tests/unit/test_wire_fuzz.py
try:
    from hypothesis import settings as _hypothesis_settings
    _hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
except ImportError:
    pass


_WALL_TIMES = pytest.StashKey[dict]()


def tier_of(path) -> str | None:
    """'unit', 'integration' or 'course' for a test file under tests/<tier>/, else None."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")   # a pytest-xdist worker, not the controller


def pytest_configure(config):
    config.stash[_WALL_TIMES] = {}
    if not _is_worker(config):   # before the workers start: they inherit the run's id
        import executed
        executed.run_id()
        executed.forget_old_runs()
    for tier, what in (("unit", "in-process, no process started (tests/unit)"),
                       ("integration", "starts processes (tests/integration)"),
                       ("course", "executes the course: notebooks, browser, exercises (tests/course)")):
        config.addinivalue_line("markers", f"{tier}: {what}")
    try:
        import torch
    except ImportError:
        return
    # More threads than usable cores only adds contention on a small shared machine; under
    # pytest-xdist the cores are shared between the workers.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (cores or 1) // workers, 8)))


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: put each test file in tests/unit, "
                                    "tests/integration or tests/course (see tests/conftest.py)")
        item.add_marker(tier)
    # The longest first, so that parallel workers finish together: notebook runs (by their
    # last recorded time), then the rest of the course, integration, unit.
    last = _last_wall_times()
    rank = {"course": 1, "integration": 2, "unit": 3}

    def key(item):
        runs = item.get_closest_marker("notebooks") is not None and "test_notebook_runs" in item.name
        return (0 if runs else rank[tier_of(item.path)], -last.get(item.nodeid, 0.0))
    items.sort(key=key)   # stable: within a rank, collection order


def _last_wall_times() -> dict:
    """{test id: seconds} of the last run (results/durations.json), or {}."""
    try:
        return json.loads((ROOT / "results" / "durations.json").read_text())
    except (OSError, ValueError):
        return {}


def pytest_runtest_logreport(report):
    if report.when == "call":
        _DURATIONS[report.nodeid] = report.duration


_DURATIONS: dict = {}
CPU_SECTION = "slowest 25 tests by CPU time (s, with their child processes; load-independent)"


def _cpu() -> float:
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """What each test costs in CPU seconds, set-up and child processes included: a machine shared
    with other work stretches wall times, not these (children count once they have been reaped)."""
    before = _cpu()
    yield
    item.config.stash[_WALL_TIMES].setdefault(CPU_SECTION, {})[item.nodeid] = _cpu() - before


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def wall_times(pytestconfig) -> dict:
    """{section: {name: seconds}}, printed at the end of the run (by the controller, merged from
    every xdist worker)."""
    return pytestconfig.stash[_WALL_TIMES]


def _wall_dir() -> Path:
    import executed
    return executed.RUNS / executed.run_id() / "wall_times"


def pytest_sessionfinish(session):
    config = session.config
    if _is_worker(config):   # hand this worker's wall times to the controller
        times = config.stash.get(_WALL_TIMES, {})
        if times:
            _wall_dir().mkdir(parents=True, exist_ok=True)
            (_wall_dir() / f"{config.workerinput['workerid']}.json").write_text(json.dumps(times))
        return
    if _DURATIONS:   # the next run orders its tests by these (longest first)
        old = _last_wall_times()
        (ROOT / "results").mkdir(exist_ok=True)
        (ROOT / "results" / "durations.json").write_text(json.dumps({**old, **_DURATIONS}, indent=0))


def pytest_terminal_summary(terminalreporter, config):
    recorded = dict(config.stash.get(_WALL_TIMES, {}))
    for f in sorted(_wall_dir().glob("*.json")) if _wall_dir().is_dir() else []:
        for section, times in json.loads(f.read_text()).items():
            recorded.setdefault(section, {}).update(times)
    recorded = {k: v for k, v in recorded.items() if v}
    if recorded:  # also kept for comparing runs: results/wall_times.json
        (ROOT / "results").mkdir(exist_ok=True)
        (ROOT / "results" / "wall_times.json").write_text(json.dumps(recorded, indent=1))
    if CPU_SECTION in recorded:
        costliest = sorted(recorded[CPU_SECTION].items(), key=lambda kv: -kv[1])
        recorded[CPU_SECTION] = dict(costliest[:25])
        total = sum(v for _, v in costliest)
        by_tier = {t: sum(v for k, v in costliest if k.startswith(f"tests/{t}/")) for t in TIERS}
        terminalreporter.write_line("CPU time of all tests: " + f"{total:.0f} s (" +
                                    ", ".join(f"{t} {v:.0f} s" for t, v in by_tier.items()) + ")")
    for section, times in recorded.items():
        if not times:
            continue
        terminalreporter.section(f"{section}: wall time")
        for name, sec in times.items():
            terminalreporter.write_line(f"{sec:8.1f} s  {name}")
        if len(times) > 1 and not section.startswith("slowest"):
            terminalreporter.write_line(f"{sum(times.values()):8.1f} s  total")
