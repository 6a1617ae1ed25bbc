"""A compressor defined outside the library (its own codec, registered here) goes through
the simulator, the DDP hook on 2 gloo ranks, the cost model and the auto policy's probe,
with no library file touched: its `protocol` class attribute is all they read."""
import os
import sys

import pytest
import torch
import torch.distributed as dist

from milktea import cost
from milktea.compressors import Compressor, register_codec
from milktea.distributed import launch, protocols
from milktea.packet import Packet

sys.path.insert(0, os.path.dirname(__file__))


class EveryOther(Compressor):
    """Sends the entries at even positions (float32); the others arrive as zeros."""
    codec = "test-every-other"
    protocol = "allgather"
    biased = True

    def _compress(self, t):
        kept = t.reshape(-1)[::2].float().contiguous()
        return Packet(self.codec, tuple(t.shape), t.dtype, (), (kept.view(torch.uint8),))


def _decode_every_other(packet, out=None):
    n = packet.numel
    if packet.parts[0].numel() != 4 * ((n + 1) // 2):
        raise ValueError(f"an every-other packet of {n} entries carries {4 * ((n + 1) // 2)} bytes")
    res = torch.zeros(packet.shape, dtype=packet.dtype) if out is None else out.zero_()
    res.view(-1)[::2] = packet.parts[0].clone().view(torch.float32).to(packet.dtype)
    return res


register_codec("test-every-other", 201, _decode_every_other, expansion=0.5)


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


def hook_vs_packets():
    """The hook's average of each parameter == mean of every rank's decoded packet."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import milktea.ddp
    from milktea.feedback import ErrorFeedback
    rank, N = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = DDP(net, bucket_cap_mb=0.004)
    state = milktea.ddp.compress(model, EveryOther(), error_feedback=True, min_size=0, start_step=0)
    senders = {n: [ErrorFeedback(EveryOther()) for _ in range(N)] for n, _ in net.named_parameters()}
    worst = 0.0
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)
        x, y = torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        for n, p in net.named_parameters():
            mine = torch.func.grad(lambda w, n=n, x=x, y=y: torch.nn.functional.cross_entropy(
                torch.func.functional_call(net, {**dict(net.named_parameters()), n: w}, (x,)), y))(p.detach())
            every = [torch.empty_like(mine) for _ in range(N)]
            dist.all_gather(every, mine)
            packets = [senders[n][r].compress(every[r]) for r in range(N)]
            expected = sum(EveryOther().decompress(q) for q in packets) / N
            worst = max(worst, (expected - p.grad).abs().max().item())
    compressed = state.stats.last.compressed
    state.close()
    return {"worst": worst, "compressed": compressed}


def test_the_ddp_hook_runs_it_on_two_gloo_ranks():
    res = launch(hook_vs_packets, 2, timeout=170)
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


def test_register_refuses_what_it_cannot_run():
    from milktea.distributed import schemes
    with pytest.raises(ValueError, match="built-in"):
        schemes.register("topk", EveryOther())
    with pytest.raises(TypeError, match="milktea compressor"):
        schemes.register("mine", object())
