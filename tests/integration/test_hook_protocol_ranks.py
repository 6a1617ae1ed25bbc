"""The compressor of tests/every_other.py, written outside the library, in the DDP hook on
2 gloo ranks and in `compare` beside dense, with no library file touched."""
from every_other import EveryOther, hook_vs_packets



def test_the_ddp_hook_runs_it_on_two_gloo_ranks(ranks):
    res = ranks(2).run(hook_vs_packets, timeout=170)
    assert res["compressed"] and res["worst"] <= 1e-6, res


def test_compare_trains_it_beside_dense():
    from milktea.distributed import schemes
    from milktea.distributed.compare import compare
    schemes.register("every-other", EveryOther(), error_feedback=True, label="every other entry+EF")
    try:
        res = compare(["dense", "every-other"], steps=3, hidden=32, link_gbit=1.0, progress=False,
                      calibrate_sizes=(1 << 12, 1 << 16), timeout=240)
    finally:
        schemes.unregister("every-other")
    rows = {r["scheme"]: r for r in res.rows}
    assert "error" not in rows["every-other"], rows["every-other"]
    assert rows["every-other"]["label"] == "every other entry+EF"
    # about half the bytes of dense (the small biases go dense, the weights lose every other entry)
    assert 0.4 < rows["every-other"]["payload_mb"] / rows["dense"]["payload_mb"] < 0.75
    assert "every-other" not in schemes.SCHEMES
