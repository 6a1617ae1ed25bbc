"""1-bit Adam on two gloo ranks: the same model on both, v frozen after warm-up, compressing."""
import pytest




@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_on_two_gloo_ranks(ranks):
    import car_workers as cw
    out = ranks(2).run(cw.onebit_adam_on_ranks, timeout=170, results="all")
    for res in out:
        assert res["same"] and res["v_frozen"] and res["compressing"]
        assert res["losses"][-1] < res["losses"][0]
        dense, late = res["wire"][0], res["wire"][-1]
        assert dense == res["n"] * 4 * 2 * (2 - 1) / 2          # warm-up: a ring all-reduce of fp32
        assert late < dense / 10                                 # then 1 bit per entry (plus headers)
