"""The library's layering: `import milktea` is cheap, and no module imports itself in a circle.

A cycle makes the import order matter (a half-initialised module hands out missing names)
and makes layers impossible to read one at a time; the cure is to move what both sides
need into the lower module.
"""
import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "milktea"

# Cycles being removed elsewhere; each entry is one cycle (its modules in any order).
KNOWN_CYCLES: list[set[str]] = []


HEAVY = ["numba", "matplotlib", "ipywidgets", "milktea.distributed", "milktea.kernels",
         "milktea.experiments", "milktea.widgets", "milktea.plots", "torchft"]

def _loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_import_milktea_loads_nothing_heavy():
    loaded = _loaded_after("import milktea")
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert not heavy, f"`import milktea` loads {heavy}; import them on first use instead"
    assert "milktea.distributed.netns" not in loaded  # it registers an atexit handler


def test_torchft_loads_only_when_a_fault_tolerant_run_starts():
    # the library, the chapter's module and the command line work where torchft is not installed
    loaded = _loaded_after("import milktea.local.ft, milktea.local.ft.cli, milktea.experiments.local_ft, "
                           "milktea.bench.ft")
    assert not [m for m in loaded if m == "torchft" or m.startswith("torchft.")]


def test_milktea_simulate_is_the_module_whichever_is_imported_first():
    # no name of the package is the function in one import order and the module in another
    # (the package's class is never swapped to hide the submodule)
    loaded = subprocess.run(
        [sys.executable, "-c", "import milktea\nfirst = milktea.simulate\nimport milktea.simulate\n"
         "from milktea.simulate import History, simulate\n"
         "print(first is milktea.simulate, callable(simulate), type(milktea).__name__)"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    assert loaded.stdout.strip() == "True True module"


def test_numba_loads_only_for_a_tensor_that_needs_it():
    small = _loaded_after("import torch, milktea\n"
                          "milktea.TopK(0.01).compress(torch.randn(1000))\n"
                          "milktea.Quantize(8).compress(torch.randn(1000))")
    assert "numba" not in small and "milktea.numba_kernels" not in small
    large = _loaded_after("import torch, milktea\nmilktea.TopK(0.01).compress(torch.randn(1 << 17))")
    assert "milktea.numba_kernels" in large or "MILKTEA_NUMBA" in os.environ
