"""Chapter 01's real all-reduce, measured between two processes."""

import pytest

from milktea.experiments import bottleneck as B


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_real_allreduce_between_two_processes():
    pytest.importorskip("milktea.distributed")
    m = B.measure_local_allreduce(sizes=(4096, 1 << 20), workers=2, repeats=2)
    assert m.correct and m.backend in ("gloo", "nccl")
    assert len(m.times) == 2 and all(t > 0 for t in m.times)
    assert m.link.bandwidth > 0 and len(m.predicted()) == 2
