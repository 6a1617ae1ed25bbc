"""Every docstring example in the library runs and prints what it says.

Every module under milktea/ is found at run time (no list to keep), except the `__main__`
entry points (importing one runs its command). An example that needs worker processes or
a display says so with `# doctest: +SKIP`.
"""
import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module_names() -> list[str]:
    names = []
    for path in sorted((ROOT / "milktea").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] != "__main__":
            names.append(".".join(parts))
    return names


MODULES = _module_names()


def test_every_module_is_found():
    assert {"milktea", "milktea.packet", "milktea.compressors.sparse", "milktea.distributed.hooks",
            "milktea.grade.sandbox", "milktea.timing"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name} (printed above)"
