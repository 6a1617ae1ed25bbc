"""Worker functions for the compressed all-reduce tests (run inside launched processes)."""
import torch
import torch.distributed as dist


def _x(rank, step, n):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(n, generator=g) * (1 + rank)


def allreduce_vs_one_process(specs, steps=3, n=1003):
    """For each (label, compressor, error_feedback): every step, the distributed result and
    the same protocol run for all ranks in this one process (on the gathered inputs):
    max |difference|, the exact mean's distance, and the wire bytes this rank logged."""
    from milktea.distributed.comm import Comm
    from milktea.distributed.compressed_allreduce import (CompressedAllReduce, allreduce, simulate_round,
                                                          wire_bytes)
    from milktea.distributed.stats import StatsLog
    rank, N = dist.get_rank(), dist.get_world_size()
    out = {}
    for label, comp, ef in specs:
        log = StatsLog()
        comm = Comm(None, None, log)
        mine = CompressedAllReduce(comp, rank, N, error_feedback=ef)
        every = [CompressedAllReduce(comp, r, N, error_feedback=ef) for r in range(N)]
        diffs, mean_err, logged, expected = [], [], [], []
        for step in range(steps):
            x = _x(rank, step, n)
            got = allreduce(mine, x, comm, step)
            log.close_step()
            xs = [torch.empty_like(x) for _ in range(N)]
            dist.all_gather(xs, x)
            ref = simulate_round(every, xs)
            diffs.append((got - ref).abs().max().item())
            mean_err.append((got - torch.stack(xs).mean(0)).abs().max().item())
            logged.append(log.last.wire_bytes)
            expected.append(wire_bytes(*every[rank].last, rank))
        out[label] = dict(diffs=diffs, mean_err=mean_err, logged=logged, expected=expected,
                          same_everywhere=_same(got))
    return out


def _same(t):
    ts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(ts, t)
    return all(torch.equal(ts[0], u) for u in ts)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48),
                               torch.nn.ReLU(), torch.nn.Linear(48, 10))


def hook_vs_one_process(codecs, steps=4):
    """The DDP hook with protocol "compressed_allreduce": per step and parameter, the hooked
    average beside the same protocol run in this process on the gathered gradients."""
    import copy
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.ddp import compress
    from milktea.distributed import protocols
    from milktea.distributed.compressed_allreduce import (CompressedAllReduce, simulate_round,
                                                          use_compressed_allreduce)
    rank, N = dist.get_rank(), dist.get_world_size()
    out = {}
    for label, comp in codecs:
        net = _net()
        ref = copy.deepcopy(net)
        model = DDP(net, bucket_cap_mb=0.004)
        state = compress(model, use_compressed_allreduce(comp), error_feedback=True, min_size=100)
        every, errs, compressed = {}, [], set()
        for step in range(steps):
            g = torch.Generator().manual_seed(1000 * step + rank)
            x, y = torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)
            for m in (model, ref):
                m.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
            names = {s.name for plan in state.plans.values() for s in plan.segments if s.compress}
            err = 0.0
            for (name, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
                if name not in names or step < state.start_step:
                    continue
                compressed.add(name)
                gs = [torch.empty_like(q.grad) for _ in range(N)]
                dist.all_gather(gs, q.grad.contiguous())
                cars = every.setdefault(name, [CompressedAllReduce(comp, r, N, error_feedback=True,
                                                                   stream=protocols.stream_of(name))
                                               for r in range(N)])
                want = simulate_round(cars, [t.reshape(-1) for t in gs]).view_as(p.grad)
                err = max(err, (p.grad - want).abs().max().item())
            errs.append(err)
        out[label] = dict(errs=errs, compressed=sorted(compressed), protocol=state.protocol_name,
                          ratio=state.stats.last.ratio if state.stats.last else None)
        state.close()
    return out


def onebit_adam_on_ranks(steps=14, warmup=6):
    """DistributedOneBitAdam on a small model: losses, bytes per step, and whether every rank
    holds the same weights and the variance stayed frozen."""
    from milktea.onebit import DistributedOneBitAdam, OneBitAdam
    rank = dist.get_rank()
    net = _net()
    opt = DistributedOneBitAdam(net.parameters(), OneBitAdam(lr=0.01, warmup=warmup))
    losses = []
    g = torch.Generator().manual_seed(rank)
    X, Y = torch.randn(64, 20, generator=g), torch.randint(0, 10, (64,), generator=g)
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(net(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == warmup:
            v0 = opt.state.v.clone()
    w = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return dict(losses=losses, wire=[s.wire_bytes for s in opt.stats.history], n=w.numel(),
                same=_same(w), v_frozen=torch.equal(v0, opt.state.v), compressing=opt.state.compressing)
