"""A compressor written outside the library, as a user would: its own codec, registered here.

tests/unit/test_hook_protocol.py and tests/integration/test_hook_protocol_ranks.py run it
through the simulator, the cost model, the DDP hook and `compare` with no library file
touched; worker processes import this module by name (tests/ is on their sys.path).
"""
import torch
import torch.distributed as dist

from milktea.compressors import Compressor, register_codec
from milktea.packet import Packet


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
