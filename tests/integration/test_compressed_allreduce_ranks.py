"""The compressed all-reduce: chunks, both ledgers, the simulator, and real gloo ranks."""

import pytest

from milktea import Quantize, RandomK, Sign, TopK

import car_workers as cw  # noqa: E402  (workers import it by this name)

CODECS = [Sign(), TopK(0.1), Quantize(4), RandomK(0.2), Quantize(8, stochastic=True)]


SPECS = [("sign", Sign(), True), ("topk", TopK(0.05), True), ("int8", Quantize(8), True),
         ("randomk", RandomK(0.1), False), ("int4-stochastic", Quantize(4, stochastic=True), True)]


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [2, 3])
def test_gloo_ranks_get_what_one_process_computes(workers, ranks):
    out = ranks(workers).run(cw.allreduce_vs_one_process, args=(SPECS,), timeout=170)
    for label, res in out.items():
        assert max(res["diffs"]) == 0.0, (label, res["diffs"])     # the same arithmetic, bit for bit
        assert res["same_everywhere"], label
        # the logged wire bytes: the padded all-to-all and all-gather, plus the size tables
        for logged, exact in zip(res["logged"], res["expected"]):
            assert exact <= logged <= exact * 1.2 + 64 * workers * workers, (label, logged, exact)
    assert max(out["int8"]["mean_err"]) < 0.1           # 8 bits both ways (|x| up to ~10): near the mean


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [2, 3])
def test_ddp_hook_runs_the_protocol(workers, ranks):
    codecs = [("sign", Sign()), ("topk", TopK(0.1)), ("int8", Quantize(8))]
    out = ranks(workers).run(cw.hook_vs_one_process, args=(codecs,), timeout=170)
    for label, res in out.items():
        assert res["protocol"] == "compressed_allreduce", label
        assert len(res["compressed"]) >= 3, (label, res["compressed"])   # the three weight matrices
        assert max(res["errs"]) == 0.0, (label, res["errs"])             # the same arithmetic, bit for bit
    assert out["sign"]["ratio"] > 5
