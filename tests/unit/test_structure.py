"""Files that hold one idea, and the attributes and hooks a compressor author meets: every
library file fits in 400 lines; `biased` decides a registered scheme's ledger; a compressor
of one's own writes its own `encode` over the simulator's rows; the protocols ask no compressor
its class."""
import ast
from pathlib import Path

import pytest
import torch

from milktea import QSGD, TopK
from milktea.compressors import Compressor
from milktea.packet import Packet
from milktea.simulate import simulate
from milktea.tasks import Quadratic

LIBRARY = Path(__file__).resolve().parents[2] / "milktea"
MAX_LINES = 400


def test_every_library_file_is_at_most_400_lines():
    long = {str(p.relative_to(LIBRARY.parent)): n for p in sorted(LIBRARY.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these into files of one idea each (<= {MAX_LINES} lines): {long}"


#: what a protocol may know of the compressors: the wire format, the codec records, the decoders
WIRE = {"milktea.compressors.packet", "milktea.compressors.codec", "milktea.compressors.registry"}
COMPRESSOR_CLASSES = {"Compressor", "Identity", "TopK", "RandomK", "Sparsifier", "Quantize", "QSGD", "TernGrad",
                      "Sign", "Cast", "PowerSGD", "Chain"}


def test_the_protocols_ask_no_compressor_what_it_is():
    for path in sorted((LIBRARY / "distributed" / "protocols").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m.startswith("milktea.compressors") and m not in WIRE}, path.name
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not named & COMPRESSOR_CLASSES, (path.name, named & COMPRESSOR_CLASSES)


def test_a_registered_scheme_gets_the_ledger_its_compressor_needs():
    from milktea.distributed import schemes
    try:
        schemes.register("test-biased", TopK(0.05))
        schemes.register("test-unbiased", QSGD(4))
        schemes.register("test-told", QSGD(4), error_feedback=True)
        assert [schemes.MILKTEA[n][2] for n in ("test-biased", "test-unbiased", "test-told")] == [True, False, True]
    finally:
        for n in ("test-biased", "test-unbiased", "test-told"):
            if n in schemes.MILKTEA:
                schemes.unregister(n)        # popping MILKTEA alone left the names in SCHEMES


class Halves(Compressor):
    """Every value halved, as float32, its `encode` over rows written for all of them at
    once (the library's "dense" codec: one float32 per entry)."""
    codec = "dense"
    calls = 0

    def _compress(self, t):
        half = (t.reshape(-1).float() / 2).contiguous()
        return Packet("dense", tuple(t.shape), torch.float32, (), (half.view(torch.uint8),))

    def encode(self, rows, *, add=None, clear_add=False, into=None):
        Halves.calls += 1
        if add is not None:
            self._add(rows, add, clear_add)
        half = (rows.reshape(rows.shape[0], -1).float() / 2).contiguous()      # every row in one pass
        shape = tuple(rows.shape[1:])
        return [Packet("dense", shape, torch.float32, (), (h.view(torch.uint8),)) for h in half], \
            [None] * rows.shape[0]


@pytest.mark.parametrize("ef", [True, False])
def test_a_compressor_of_ones_own_writes_its_encode_over_rows(ef):
    run = dict(workers=3, steps=6, progress=False, device="cpu", error_feedback=ef, eval_every=3)
    Halves.calls = 0
    fast = simulate(Quadratic(50, noise=1.0, samples=4), Halves(), **run)
    assert Halves.calls == 6                          # one call a step for the three workers
    slow = simulate(Quadratic(50, noise=1.0, samples=4), Halves(), batched=False, **run)
    assert fast.evals == slow.evals and fast.bytes_sent == slow.bytes_sent and fast.loss == slow.loss
