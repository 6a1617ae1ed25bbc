"""The DDP hook's all-gather allocates nothing of a packet's size once its buffers are
sized: the bytes go through a send buffer and per-rank receive buffers kept between steps,
and int8 codes and sign bits are written into the send buffer where they are made. A
per-step copy of a packet, of a bucket's payload or of the gathered bytes coming back
would fail here (before these buffers, int8's largest allocation per step was its
codes, a quarter of the weight's size; and Sign's bits, a 32nd, are now written in place too)."""
import pytest

import dist_workers as w


# Top-1%'s decode makes int64 indices of every rank's k entries: 2 x 8 bytes x 1% = 0.04x
@pytest.mark.parametrize("name,most", [("topk", 0.05), ("sign", 0.02), ("int8", 0.02)])
def test_no_step_allocates_a_packets_size_once_the_buffers_are_sized(ranks, name, most):
    for res in ranks(2).run(w.protocol_allocations, args=(name,), results="all", timeout=170):
        assert res["same"], "the kept buffers changed the result"
        later = res["largest"][1:]            # step 0 sizes the buffers (and makes the ledger)
        assert max(later) < most * res["model_bytes"], (name, res["largest"])
        assert all(b == res["buffers"][2] for b in res["buffers"][2:]), res["buffers"]
