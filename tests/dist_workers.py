"""Functions that the distributed tests run inside worker processes (must be importable)."""
import os
import time

import torch
import torch.distributed as dist


def rank_sum():
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(),
            "threads": torch.get_num_threads(), "pid": os.getpid()}


def fail_on(rank_to_fail, pid_dir=None):
    """rank_to_fail raises; the others block in a collective that can never finish."""
    if pid_dir:
        open(os.path.join(pid_dir, str(os.getpid())), "w").close()
    if dist.get_rank() == rank_to_fail:
        time.sleep(0.2)
        raise ValueError(f"boom on purpose in rank {rank_to_fail}")
    dist.barrier()
    time.sleep(600)


def exit_hard(rank_to_die):
    if dist.get_rank() == rank_to_die:
        os._exit(7)
    dist.barrier()
    time.sleep(600)


# --- hooks against the single-process aggregation ------------------------------------------
def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48),
                               torch.nn.ReLU(), torch.nn.Linear(48, 10))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)


def _powersgd_reference(mats, Qs, residuals, rank_r, N):
    """Shared-basis PowerSGD in float64: P = sum M_i Q, orthonormalise, Q = mean M_i^T P."""
    from milktea.compressors import orthonormalize
    ms = [m.double() + (residuals[i] if residuals[i] is not None else 0) for i, m in enumerate(mats)]
    P = sum(m @ Qs for m in ms)
    P = orthonormalize(P)
    qs = [m.t() @ P for m in ms]
    new_res = [m - P @ q.t() for m, q in zip(ms, qs)]
    Q = sum(qs) / N
    return P @ Q.t(), Q, new_res


def hooks_vs_reference(specs, steps=4, min_size=0, bucket_cap_mb=0.004):
    """For each (label, compressor, error_feedback): max |DDP hook average - reference| per step.

    Reference: every rank's local gradient is gathered; each rank's packets are recomputed
    here with the same per-bucket sender, and averaged as compressor.aggregate(packets) / N
    (PowerSGD: the shared-basis algorithm in float64)."""
    import copy
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.dist import hooks, families
    from milktea.compressors import PowerSGD
    rank, N = dist.get_rank(), dist.get_world_size()
    out = {}
    for label, comp, ef in specs:
        net = _net()
        ref = copy.deepcopy(net)
        model = DDP(net, bucket_cap_mb=bucket_cap_mb)
        state = hooks.compress(model, comp, error_feedback=ef, min_size=min_size)
        senders, ps_state = {}, {}
        errs = []
        for step in range(steps):
            x, y = _batch(rank, step)
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            ref.zero_grad()
            torch.nn.functional.cross_entropy(ref(x), y).backward()
            local = {n: p.grad.reshape(-1) for n, p in ref.named_parameters()}
            got = {n: p.grad.reshape(-1) for n, p in net.named_parameters()}
            err = 0.0
            if step == 0 or not state.plans:
                for n in local:
                    g = torch.stack(_all_gather(local[n])).mean(0)
                    err = max(err, (g - got[n]).abs().max().item())
                errs.append(err)
                continue
            for index, plan in sorted(state.plans.items()):
                names_c = [s.name for s in plan.segments if s.compress]
                for s in plan.segments:
                    if not s.compress:
                        g = torch.stack(_all_gather(local[s.name])).mean(0)
                        err = max(err, (g - got[s.name]).abs().max().item())
                if not names_c:
                    continue
                if isinstance(comp, PowerSGD):
                    for s in plan.segments:
                        if not s.compress:
                            continue
                        every = [t.view(s.shape[0], -1) for t in _all_gather(local[s.name])]
                        key = (index, s.name)
                        Q, res = ps_state.get(key, (None, [None] * N))
                        if Q is None:
                            r = min(comp.rank, *every[0].shape)
                            Q = torch.randn(every[0].shape[1], r,
                                            generator=torch.Generator().manual_seed(comp.seed)).double()
                        approx, Qn, res2 = _powersgd_reference(every, Q, res if ef else [None] * N, comp.rank, N)
                        ps_state[key] = (Qn if comp.warm_start else None, res2 if ef else [None] * N)
                        err = max(err, (approx.reshape(-1).float() - got[s.name]).abs().max().item())
                    continue
                mine = torch.cat([local[n] for n in names_c])
                every = _all_gather(mine)
                packets = []
                for r in range(N):
                    if (r, index) not in senders:
                        senders[(r, index)] = families.make_sender(comp, ef, r, index)
                    packets.append(senders[(r, index)].compress(every[r]))
                expected = comp.aggregate(packets).reshape(-1) / N
                hook_avg = torch.cat([got[n] for n in names_c])
                err = max(err, (expected - hook_avg).abs().max().item())
            errs.append(err)
        last = state.stats.last
        out[label] = {"errors": errs, "ratio": last.ratio, "compressed": last.compressed,
                      "buckets": len(state.plans), "scale": max(g.abs().max().item() for g in got.values())}
        state.close()
    return out


def _all_gather(t):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts
