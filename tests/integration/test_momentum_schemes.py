"""A momentum-corrected scheme trains under DDP on two gloo processes: its optimizer has no
momentum (the hook keeps it), and its loss stays finite where the plain scheme's may not."""
import pytest

from milktea.distributed.compare import compare


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_topk_with_momentum_correction_trains_beside_dense():
    ab = compare(["dense", "topk-mc"], workers=2, link_gbit=None, steps=6, hidden=64, lr=0.05, progress=False)
    rows = {r["scheme"]: r for r in ab.rows}
    assert "error" not in rows["topk-mc"] and rows["topk-mc"]["ratio"] > 2
    assert "momentum corrected" in rows["topk-mc"]["label"]
    res = next(r for r in ab.results if r["scheme"] == "topk-mc")
    assert res["config"]["momentum"] == 0.9                   # the config's momentum, kept by the hook
    assert all(rec["loss"] == rec["loss"] for rec in res["records"])
