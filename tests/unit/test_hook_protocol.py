"""A compressor defined outside the library (its own codec, registered here) goes through
the simulator, the DDP hook on 2 gloo ranks, the cost model and the auto policy's probe,
with no library file touched: its `protocol` class attribute is all they read."""

import pytest
import torch

from milktea import cost
from milktea.distributed import protocols
from milktea.packet import Packet



from every_other import EveryOther  # noqa: E402 - a compressor in a user's own file


def test_the_cost_model_and_the_simulator_read_its_protocol():
    c = EveryOther()
    assert protocols.protocol_of(c) == "allgather" and protocols.collective_for(c) == "allgather"
    x = torch.randn(1001)
    assert torch.equal(c.decompress(Packet.from_bytes(c.compress(x).to_bytes()))[::2], x[::2])
    from milktea.simulate import simulate
    from milktea.tasks import Quadratic
    hist = simulate(Quadratic(100), c, workers=2, steps=30, progress=False, device="cpu")
    assert hist.final("error") < hist.evals["error"][0]
    assert hist.bytes_sent[0] == [c.compress(torch.zeros(100)).nbytes] * 2


def test_the_auto_policy_probes_it():
    p = protocols.get("allgather")(EveryOther(), error_feedback=True, rank=0, world=2)
    codec_s, comm_s = p.probe([torch.randn(64, 64)], cost.Link.gbit(1))
    assert codec_s > 0 and comm_s > cost.allgather_time(2 * 64 * 64, 2, cost.Link.gbit(1))


def test_register_refuses_what_it_cannot_run():
    from milktea.distributed import schemes
    with pytest.raises(ValueError, match="built-in"):
        schemes.register("topk", EveryOther())
    with pytest.raises(TypeError, match="milktea compressor"):
        schemes.register("mine", object())
