"""Every docstring example in the core modules runs and prints what it says."""
import doctest
import importlib

import pytest

MODULES = ["milktea", "milktea.packet", "milktea.bits", "milktea.index", "milktea.feedback",
           "milktea.compressors.base", "milktea.compressors.sparse", "milktea.compressors.quantize",
           "milktea.compressors.sign", "milktea.compressors.cast", "milktea.compressors.powersgd",
           "milktea.compressors.chain", "milktea.cost", "milktea.tasks", "milktea.distributed.protocols"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
