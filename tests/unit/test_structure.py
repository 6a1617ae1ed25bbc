"""Files that hold one idea, and the attributes and hooks a compressor author meets: every
library file fits in 400 lines; `biased` decides a registered scheme's ledger; a compressor
of one's own can join the simulator's batched path; the protocols ask no compressor its class."""
import ast
from pathlib import Path

import pytest
import torch

from milktea import ErrorFeedback, QSGD, TopK
from milktea.batched import Custom, batch_for
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


def test_the_protocols_ask_no_compressor_what_it_is():
    for path in sorted((LIBRARY / "distributed" / "protocols").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m.startswith("milktea.compressors")}, path.name


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
    """Every value halved, as float32, with a batched path of its own (the library's
    "dense" codec: one float32 per entry)."""
    codec = "dense"
    calls = 0

    def _compress(self, t):
        half = (t.reshape(-1).float() / 2).contiguous()
        return Packet("dense", tuple(t.shape), torch.float32, (), (half.view(torch.uint8),))

    def compress_batch(self, X, shape, error_feedback):
        Halves.calls += 1
        D = X / 2                                    # each row's packet, decoded
        total = D[0].clone()
        for row in D[1:]:                            # in row order, as aggregate adds packets
            total += row
        if error_feedback:
            X -= D
        nbytes = Halves()._compress(X[0].view(shape)).nbytes
        return total, [nbytes] * X.shape[0]


@pytest.mark.parametrize("ef", [True, False])
def test_a_compressor_of_ones_own_joins_the_batched_path(ef):
    assert isinstance(batch_for([Halves() for _ in range(3)], (50,)), Custom)
    assert batch_for([ErrorFeedback(Halves()) for _ in range(3)], (50,)) is not None
    run = dict(workers=3, steps=6, progress=False, device="cpu", error_feedback=ef, eval_every=3)
    Halves.calls = 0
    fast = simulate(Quadratic(50, noise=1.0, samples=4), Halves(), **run)
    assert Halves.calls == 6
    slow = simulate(Quadratic(50, noise=1.0, samples=4), Halves(), batched=False, **run)
    assert fast.evals == slow.evals and fast.bytes_sent == slow.bytes_sent and fast.loss == slow.loss
