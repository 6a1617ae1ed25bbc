"""tests/unit: in-process tests. None may start a process; this checks it while they run.

A test that needs a process (worker ranks, a CLI, a sandboxed child, a linter) belongs in
tests/integration/. Statically, tests/unit/test_layout.py refuses the imports that start them.
"""
import os
import traceback

import _posixsubprocess
import subprocess

import pytest

_PATCHED = [(os, "fork"), (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"),
            (os, "system"), (_posixsubprocess, "fork_exec"),
            (subprocess, "_fork_exec")]   # subprocess keeps its own reference


def _refuse(name):
    def refused(*args, **kwargs):
        where = "".join(traceback.format_stack(limit=8)[:-1])
        raise RuntimeError(f"a unit test may not start a process (it called {name}); move the "
                           f"test to tests/integration/. Called from:\n{where}")
    return refused


def _warm_caches():
    """Library code that runs a helper program once and caches the answer (matplotlib asks
    fc-list for the system's fonts, platform asks uname): run it before any test, so no test pays for it."""
    import platform
    platform.platform()   # asks `uname -p` once
    try:
        from matplotlib import font_manager
        font_manager.findSystemFonts()
    except Exception:  # noqa: BLE001 - a missing matplotlib fails the tests that need it
        pass


@pytest.fixture(scope="session", autouse=True)
def _caches_warm():
    _warm_caches()


@pytest.fixture(autouse=True)
def _no_process(monkeypatch, _caches_warm):
    for module, name in _PATCHED:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, _refuse(f"{module.__name__}.{name}"))
    yield



@pytest.fixture(autouse=True)
def _language_kept():
    """A test that leaves the library speaking another language fails here, itself, instead
    of turning a later test on the same worker red (which one depends on the order)."""
    from milktea import i18n
    before = i18n.language()
    yield
    after = i18n.language()
    if after != before:
        i18n.use(before)
        pytest.fail(f"the test left the library speaking {after!r} (it spoke {before!r}): use "
                    "i18n.speaking(lang), or give the language back in a fixture's teardown")
