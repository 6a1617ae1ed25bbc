"""Functions that the distributed tests run inside worker processes (must be importable)."""
import math
import os
import time

import torch
import torch.distributed as dist

from milktea.feedback import ErrorFeedback


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


def _gpt_pieces():
    """A one-layer character GPT, its windows of text and its loss (milktea.gpt)."""
    from milktea.tasks import CharGPT
    task = CharGPT(n_layer=1, n_head=2, n_embd=32, block=16, max_val_windows=1)

    def batch(rank, step):
        g = torch.Generator().manual_seed(1000 * step + rank)
        idx = torch.randint(len(task.y_train), (4,), generator=g)
        return task.x_train[idx], task.y_train[idx]
    return task.model, batch, lambda out, y: task.loss(out, y).mean()


def _pieces(network):
    """(build the network, batch(rank, step), loss(output, target)) for `network`."""
    if network == "gpt":
        return _gpt_pieces()
    return _net, _batch, torch.nn.functional.cross_entropy


def hooks_vs_reference(specs, steps=4, bucket_cap_mb=0.004, network="mlp"):
    """For each (label, compressor, error_feedback, min_size): max |DDP hook average - reference|
    per step, on `network` ("mlp": the small MLP above; "gpt": a one-layer character GPT).

    Reference: every rank's local gradient is gathered; each rank's packets are recomputed
    here, per parameter, with the same per-parameter sender (fork(rank, stream_of(name))),
    and averaged as compressor.aggregate(packets) / N (PowerSGD: the shared-basis algorithm
    in float64)."""
    import copy
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks, protocols
    from milktea.compressors import PowerSGD
    rank, N = dist.get_rank(), dist.get_world_size()
    make_net, make_batch, loss_fn = _pieces(network)
    out = {}
    for label, comp, ef, min_size in specs:
        net = make_net()
        ref = copy.deepcopy(net)
        model = DDP(net, bucket_cap_mb=bucket_cap_mb)
        state = hooks.compress(model, comp, error_feedback=ef, min_size=min_size)
        senders, ps_state = {}, {}
        errs, dense_errs = [], []
        for step in range(steps):
            x, y = make_batch(rank, step)
            model.zero_grad()
            loss_fn(model(x), y).backward()
            ref.zero_grad()
            loss_fn(ref(x), y).backward()
            local = {n: p.grad for n, p in ref.named_parameters()}
            got = {n: p.grad for n, p in net.named_parameters()}
            err = derr = 0.0
            if step == 0 or not state.plans:
                for n in local:
                    g = torch.stack(_all_gather(local[n])).mean(0)
                    derr = max(derr, (g - got[n]).abs().max().item())
                dense_errs.append(derr)
                continue
            for plan in state.plans.values():
                if isinstance(comp, PowerSGD) and comp.batched:   # the bucket's compressed tensors as one matrix
                    err = max(err, _batched_error(plan, local, got, comp, ps_state, ef, N))
                for s in plan.segments:
                    every = _all_gather(local[s.name])
                    if s.compress and isinstance(comp, PowerSGD) and comp.batched:
                        continue
                    if not s.compress:
                        g = torch.stack(every).mean(0)
                        derr = max(derr, (g - got[s.name]).abs().max().item())
                    elif isinstance(comp, PowerSGD):
                        every = [t.view(s.shape[0], -1) for t in every]
                        Q, res = ps_state.get(s.name, (None, [None] * N))
                        if Q is None:
                            r = min(comp.rank, *every[0].shape)
                            Q = torch.randn(every[0].shape[1], r,
                                            generator=torch.Generator().manual_seed(comp.seed)).double()
                        approx, Qn, res2 = _powersgd_reference(every, Q, res if ef else [None] * N, comp.rank, N)
                        ps_state[s.name] = (Qn if comp.warm_start else None, res2 if ef else [None] * N)
                        err = max(err, (approx.reshape(s.shape).float() - got[s.name]).abs().max().item())
                    else:
                        packets = []
                        for r in range(N):
                            if (r, s.name) not in senders:
                                c = comp.fork(r, protocols.stream_of(s.name))
                                senders[(r, s.name)] = ErrorFeedback(c) if ef else c
                            packets.append(senders[(r, s.name)].compress(every[r]))
                        expected = comp.aggregate(packets) / N
                        err = max(err, (expected - got[s.name]).abs().max().item())
            errs.append(err)
            dense_errs.append(derr)
        last = state.stats.last
        out[label] = {"errors": errs, "dense_errors": dense_errs, "ratio": last.ratio, "compressed": last.compressed,
                      "buckets": len(state.plans), "scale": max(g.abs().max().item() for g in got.values()),
                      "dense_segments": sum(not s.compress for p in state.plans.values() for s in p.segments)}
        state.close()
    return out


def _batched_error(plan, local, got, comp, ps_state, ef, N):
    """Batched PowerSGD's reference for one bucket: its compressed tensors, in bucket order,
    flattened into one zero-padded n x n matrix per rank, through the float64 algorithm."""
    segs = [s for s in plan.segments if s.compress]
    if not segs:
        return 0.0
    key, numel = "|".join(s.name for s in segs), sum(s.numel for s in segs)
    n = math.isqrt(numel - 1) + 1
    mats = []
    for r_flat in zip(*[_all_gather(local[s.name].reshape(-1)) for s in segs]):
        flat = torch.zeros(n * n, dtype=torch.float64)
        flat[:numel] = torch.cat(r_flat).double()
        mats.append(flat.view(n, n))
    Q, res = ps_state.get(key, (None, [None] * N))
    if Q is None:
        Q = torch.randn(n, min(comp.rank, n), generator=torch.Generator().manual_seed(comp.seed)).double()
    approx, Qn, res2 = _powersgd_reference(mats, Q, res if ef else [None] * N, comp.rank, N)
    ps_state[key] = (Qn if comp.warm_start else None, res2 if ef else [None] * N)
    out, off = 0.0, 0
    for s in segs:
        want = approx.reshape(-1)[off: off + s.numel].reshape(s.shape).float()
        out = max(out, (want - got[s.name]).abs().max().item())
        off += s.numel
    return out


def _all_gather(t):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts


# --- state, options, links ----------------------------------------------------------------
def _step(model, rank, step):
    x, y = _batch(rank, step)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])


def state_round_trips(comps, ef=True):
    return [state_round_trip(c, ef) for c in comps]


def state_round_trip(comp, ef):
    """Grads of step 3 from the original hook vs from a fresh DDP (other buckets) whose hook
    loaded the original's state_dict, and vs a fresh hook that loaded nothing."""
    import copy
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks
    rank = dist.get_rank()
    net = _net()
    model = DDP(net, bucket_cap_mb=0.004)
    state = hooks.compress(model, comp, error_feedback=ef, min_size=0)
    for step in range(3):
        _step(model, rank, step)
    saved = state.state_dict()
    net2 = copy.deepcopy(net)
    model2 = DDP(net2, bucket_cap_mb=0.01)    # other buckets: the state is keyed by parameter
    state2 = hooks.compress(model2, comp, error_feedback=ef, min_size=0)
    state2.load_state_dict(saved)
    original = _step(model, rank, 3)
    restored = _step(model2, rank, 3)
    compressed_at_once = state2.stats.last.compressed
    fresh = DDP(copy.deepcopy(net), bucket_cap_mb=0.004)
    fstate = hooks.compress(fresh, comp, error_feedback=ef, min_size=0, start_step=0)
    unrestored = _step(fresh, rank, 3)
    residual_norm = sum(float(r.norm()) for r in saved["params"]["residuals"].values())
    for s in (state, state2, fstate):
        s.close()
    return {"max_diff": (original - restored).abs().max().item(), "step": saved["step"],
            "unrestored_diff": (original - unrestored).abs().max().item(), "residual_norm": residual_norm,
            "compressed_at_once": compressed_at_once}


def start_step_check(start_step):
    """Per step: compressed or not, and |hook average - exact mean| (0 while dense)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks
    from milktea.compressors import TopK
    rank = dist.get_rank()
    net = _net()
    model = DDP(net, bucket_cap_mb=0.004)
    state = hooks.compress(model, TopK(0.05), error_feedback=True, start_step=start_step, min_size=0)
    ref = _net()
    rows = []
    for step in range(start_step + 2):
        got = _step(model, rank, step)
        local = _step(ref, rank, step)
        mean = torch.stack(_all_gather(local)).mean(0)
        rows.append((state.stats.last.compressed, (got - mean).abs().max().item()))
    state.close()
    return rows


def emulated_collectives(bandwidth, latency, nbytes):
    """Measured seconds vs the cost model's for an all-reduce, an all-gather of packets,
    and PyTorch's fp16 hook, through an emulated link."""
    import time as _t
    from milktea import cost
    from milktea.distributed.comm import Comm
    from milktea.distributed.link import EmulatedLink, emulate_torch_collectives
    from milktea.distributed.stats import StatsLog
    link = EmulatedLink(cost.Link(bandwidth, latency))
    N = dist.get_world_size()
    log = StatsLog()
    comm = Comm(None, link, log)
    t = torch.ones(nbytes // 4)
    dist.barrier()
    t0 = _t.perf_counter()
    comm.all_reduce(t)
    ar = _t.perf_counter() - t0
    payload = torch.zeros(nbytes // 10 + dist.get_rank(), dtype=torch.uint8)
    dist.barrier()
    t0 = _t.perf_counter()
    parts = comm.all_gather_bytes(payload)
    ag = _t.perf_counter() - t0
    width = nbytes // 10 + N - 1
    log2 = StatsLog()
    x = torch.ones(nbytes // 4)
    dist.barrier()
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    with emulate_torch_collectives(link, log2) as torch_dist:   # what PyTorch's hooks call
        t0 = _t.perf_counter()
        torch_dist.all_reduce(x)
        torch_ar = _t.perf_counter() - t0
        inside = default_hooks.dist is torch_dist
    # only PyTorch's hook modules see the proxy, and only inside the block; torch.distributed
    # itself is untouched
    untouched = inside and default_hooks.dist is dist and dist.all_reduce.__module__.startswith("torch.distributed")
    return {"allreduce": (ar, cost.ring_allreduce_time(nbytes, N, link.link)),
            "allgather": (ag, cost.allgather_time(8, N, link.link) + cost.allgather_time(width, N, link.link)),
            "torch_allreduce": (torch_ar, cost.ring_allreduce_time(nbytes, N, link.link)),
            "sizes": [p.numel() for p in parts], "logged": log.current(0).predicted_comm_s,
            "sum": float(x[0]), "torch_logged": log2.current(0).collectives, "untouched": untouched}


def measured_allreduce(latency):
    """calibrate.measure_allreduce through an emulated link, its tries counted; each of rank
    1's tries takes 20 ms longer (after the collective), so only the slowest-rank agreement
    gives rank 0 that figure too."""
    from milktea import cost
    from milktea.distributed import calibrate
    from milktea.distributed.link import EmulatedLink
    tries, real = [], calibrate.time_it

    def counted(fn, **kw):
        tries.append(kw["repeat"])
        slowed = (lambda: (fn(), time.sleep(0.02))) if dist.get_rank() == 1 else fn
        return real(slowed, **kw)
    calibrate.time_it = counted
    try:
        sizes, times = calibrate.measure_allreduce((4096, 2 << 20), repeats=2,
                                                   emulated=EmulatedLink(cost.Link(1e9, latency)))
    finally:
        calibrate.time_it = real
    return {"rank": dist.get_rank(), "sizes": sizes, "times": times, "tries": tries}


def nan_gradient(error_feedback=False):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks
    from milktea.compressors import TopK
    model = DDP(_net())
    hooks.compress(model, TopK(0.1), min_size=0, error_feedback=error_feedback)
    for step in range(3):
        x, y = _batch(dist.get_rank(), step)
        if step == 2 and dist.get_rank() == 1:
            x[0, 0] = float("nan")
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()


def hook_refusals():
    """What the hook says to settings it cannot take: [exception type, message] per try."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks
    from milktea.compressors import TopK
    model, out = DDP(_net()), []
    for kw in ({"start_step": -1}, {"min_size": 1.5}, {"min_size": True}, {"policy": "sometimes"}):
        try:
            hooks.compress(model, TopK(0.1), **kw)
        except (TypeError, ValueError) as e:
            out.append([type(e).__name__, str(e)])
    return out


def shaped_allreduce(nbytes):
    """Inside network namespaces: time a dense all-reduce, calibrate the cost model."""
    import time as _t
    from milktea.distributed.calibrate import calibrate_link
    t = torch.ones(nbytes // 4)
    dist.all_reduce(t)                     # connect, warm up
    t.fill_(dist.get_rank() + 1)
    dist.barrier()
    t0 = _t.perf_counter()
    dist.all_reduce(t)
    seconds = _t.perf_counter() - t0
    link = calibrate_link((4096, 1 << 18, 1 << 20), repeats=2)
    return {"seconds": seconds, "nbytes": nbytes, "sum": float(t[0]), "link": repr(link),
            "addr": os.environ["MASTER_ADDR"]}


# --- the hook beside other collectives, re-bucketing, unused parameters, no_sync -------------
class Branchy(torch.nn.Module):
    """`a` is used only when asked (on some ranks, some steps); `b` is never used."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.head, self.a = torch.nn.Linear(20, 64), torch.nn.Linear(64, 64)
        self.b, self.out = torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)

    def forward(self, x, use_a=True, mid=None):
        h = torch.relu(self.head(x))
        if use_a:
            h = h + torch.relu(self.a(h))
        if mid is not None:
            h = mid(h)
        return self.out(h)


class AllReduceInBackward(torch.autograd.Function):
    """Identity forward; its backward runs the user's own all-reduce on the default group
    while the hook's buckets are in flight (as SyncBatchNorm does)."""
    seen = []

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        t = torch.full((4096,), float(dist.get_rank() + 1))
        dist.all_reduce(t)
        AllReduceInBackward.seen.append(float(t[0]))
        return g


def _scenario_steps(kind, rank, step):
    """(forward keyword arguments per micro-step) for one step of a scenario."""
    if kind == "find_unused":    # `a`: used on some ranks; on no rank at every third step
        return [dict(use_a=step % 3 != 2 and (step + rank) % 2 == 0)]
    if kind == "user_allreduce":
        return [dict(mid=AllReduceInBackward.apply)]
    if kind == "no_sync":        # two micro-batches accumulated, the second one synchronised
        return [dict(use_a=rank == 0), dict(use_a=True)]
    return [dict()]


def scenario(kind, specs, steps=6):
    """For each (label, compressor, error feedback): train `steps` steps of `kind` and check
    the ledger invariant per parameter, relative to the gradients' size:

        sum over steps of the averaged gradient DDP applied (None: 0)
          + mean over ranks of the hook's ledger (AllReduce's ledgers hold gradient / N)
        == mean over ranks of the sum of every gradient the rank computed

    Dense (compressor None): the applied gradient must be the exact mean at every step."""
    import copy
    from torch.nn.parallel import DistributedDataParallel as DDP
    from milktea.distributed import hooks
    rank, N = dist.get_rank(), dist.get_world_size()
    out = {}
    for label, comp, ef in specs:
        AllReduceInBackward.seen.clear()
        if kind == "two_models":   # a GAN step: generator and discriminator, one backward
            nets = {"g": torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 20)),
                    "d": _net()}
        else:
            nets = {"m": Branchy()}
        refs = {k: copy.deepcopy(n) for k, n in nets.items()}
        opts = dict(bucket_cap_mb=0.004, find_unused_parameters=kind not in ("two_models", "static_graph"),
                    static_graph=kind == "static_graph")
        models = {k: DDP(n, **opts) for k, n in nets.items()}
        states = {k: hooks.compress(m, comp, error_feedback=ef, min_size=0, start_step=0)
                  for k, m in models.items()}
        names = [(k, n) for k, net in nets.items() for n, _ in net.named_parameters()]
        applied = {kn: 0.0 for kn in names}
        local = {kn: 0.0 for kn in names}
        dense_err = 0.0
        for step in range(steps):
            for ms in (models, refs):
                for m in ms.values():
                    m.zero_grad(set_to_none=True)
            micro = _scenario_steps(kind, rank, step)
            for i, kw in enumerate(micro):
                g = torch.Generator().manual_seed(100 * step + 10 * rank + i)
                x, y = torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)
                z = torch.randn(8, 8, generator=g)
                for ms in (models, refs):
                    sync = ms is refs or i == len(micro) - 1
                    ctx = ms["m"].no_sync() if not sync else _nullcontext()
                    with ctx:
                        if kind == "two_models":
                            loss = torch.nn.functional.cross_entropy(ms["d"](ms["g"](z)), y)
                        else:
                            loss = torch.nn.functional.cross_entropy(ms["m"](x, **kw), y)
                        loss.backward()
            for k, n in names:
                got = dict(nets[k].named_parameters())[n].grad
                mine = dict(refs[k].named_parameters())[n].grad
                mine = torch.zeros_like(dict(refs[k].named_parameters())[n]) if mine is None else mine
                applied[(k, n)] = applied[(k, n)] + (0.0 if got is None else got)
                local[(k, n)] = local[(k, n)] + mine
                if comp is None and got is not None:
                    mean = torch.stack(_all_gather(mine)).mean(0)
                    dense_err = max(dense_err, (got - mean).abs().max().item())
        worst = 0.0
        for k, n in names:
            p = dict(nets[k].named_parameters())[n]
            proto = states[k].protocol
            led = proto.ledgers.get(n) if proto is not None else None
            res = None if led is None else led.residual
            res = torch.zeros_like(p) if res is None else res.view_as(p)
            unit = N if states[k].protocol_name == "allreduce" else 1
            lhs = applied[(k, n)] + unit * torch.stack(_all_gather(res)).mean(0)
            rhs = torch.stack(_all_gather(local[(k, n)] + torch.zeros_like(p))).mean(0)
            scale = max(rhs.abs().max().item(), 1e-12)
            worst = max(worst, (lhs - rhs).abs().max().item() / scale)
        stats = [s.stats for s in states.values()]
        out[label] = {"rel_err": worst, "dense_err": dense_err,
                      "compressed": all(s.history[-1].compressed for s in stats) if comp is not None else None,
                      "user_allreduce": sorted(set(AllReduceInBackward.seen)),
                      "plans": sum(len(s.plans) for s in states.values()),
                      "buckets": sum(s.history[-1].buckets for s in stats)}
        for s in states.values():
            s.close()
            s.close()        # idempotent
        import threading
        out[label]["threads_left"] = [t.name for t in threading.enumerate() if t.name == "milktea-comm"]
    return out


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- restarting into new processes ----------------------------------------------------------
def restart_phase(specs, phase, path, steps=6, stop=3, min_size=1024):
    """phase "full": train `steps` steps; "first": train `stop` steps and save a checkpoint per
    spec; "second" (new processes): load it and train the remaining steps. Returns, per
    label, the gradients DDP applied in the steps after `stop` and the final weights."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import milktea.ddp
    rank = dist.get_rank()
    out = {}
    for label, comp, ef in specs:
        net = _net()
        model = DDP(net, bucket_cap_mb=0.004)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        state = milktea.ddp.compress(model, comp, error_feedback=ef, min_size=min_size)
        where = os.path.join(path, label)
        first = 0
        if phase == "second":
            milktea.ddp.load_checkpoint(where, model, opt, state)
            first = stop
        grads = []
        for step in range(first, stop if phase == "first" else steps):
            g = _step(model, rank, step)
            opt.step()
            if step >= stop:
                grads.append(g)
        if phase == "first":
            milktea.ddp.save_checkpoint(where, model, opt, state)
        out[label] = {"grads": grads, "weights": torch.cat([p.detach().reshape(-1) for p in net.parameters()]),
                      "compressed": state.stats.last.compressed}
        state.close()
    return out


def load_refusals(path):
    """Another rank's hook state, and a checkpoint of another world size: both refused."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import milktea.ddp
    from milktea import TopK
    model = DDP(_net())
    state = milktea.ddp.compress(model, TopK(0.1), error_feedback=True)
    _step(model, dist.get_rank(), 0)
    errors = {}
    other = state.state_dict()
    other["rank"] = (other["rank"] + 1) % dist.get_world_size()
    for what, fn in (("rank", lambda: state.load_state_dict(other)),
                     ("world", lambda: milktea.ddp.load_checkpoint(path, model, None, state))):
        try:
            fn()
            errors[what] = None
        except ValueError as e:
            errors[what] = str(e)
    state.close()
    return errors


def slowest_codec():
    """Two Top-K steps, then each rank claims a different codec time; Run.finish must
    hand every rank the slowest rank's figures (the collective waited for it)."""
    from milktea.distributed.train import Run, TrainConfig
    run = Run(TrainConfig(scheme="topk", steps=2, hidden=32, batch=8))
    for _ in range(2):
        run.step()
    rank = dist.get_rank()
    for r in run.records:   # rank 1 compresses slower, rank 0 decodes slower
        r["compress_s"], r["decode_s"] = 1.0 + rank, 2.0 - rank
    out = run.finish()
    return [(r["step"], r["compress_s"], r["decode_s"]) for r in out["records"]]


def protocol_allocations(name, steps=5, n=1 << 22):
    """The all-gather protocol on these ranks for `steps` steps of one bucket (a weight of
    `n` entries and a bias), run where the profiler sees it (this thread): per step the
    largest tensor torch allocated, and the addresses of the Comm's kept buffers; and
    whether the bucket ends bit for bit as when the packets are concatenated anew."""
    from torch.profiler import ProfilerActivity, profile

    from milktea import Quantize, Sign, TopK
    from milktea.distributed import protocols
    from milktea.distributed.comm import Comm

    def compressor():
        return {"topk": TopK(0.01), "sign": Sign(), "int8": Quantize(8)}[name]

    class Fresh:      # a communicator with no send buffer: AllGather.encode makes one per call
        def __init__(self, comm):
            self.comm, self.log, self.world = comm, None, comm.world

        def all_gather_tailed(self, payload, tail, step):
            parts, heads = self.comm.all_gather_tailed(payload.clone(), tail, step)
            return [p.clone() for p in parts], [h.copy() for h in heads]

    rank, world = dist.get_rank(), dist.get_world_size()
    kind = protocols.get(protocols.protocol_of(compressor()))
    kept, fresh = (kind(compressor(), name != "int8", rank, world) for _ in range(2))
    comm, other = Comm(None), Fresh(Comm(None))
    bucket, twin = torch.empty(n + 1000), torch.empty(n + 1000)
    g = torch.Generator().manual_seed(rank)
    largest, buffers, same = [], [], True
    for step in range(steps):
        bucket.copy_(torch.randn(n + 1000, generator=g))
        twin.copy_(bucket)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            kept.run(comm, [protocols.Item("w", bucket[:n].view(1024, -1)),
                            protocols.Item("b", bucket[n:])], step)
        largest.append(max([e.self_cpu_memory_usage for e in prof.events()] + [0]))
        buffers.append([comm._send.data_ptr()] + [b.data_ptr() for b in comm._recv.values()])
        fresh.run(other, [protocols.Item("w", twin[:n].view(1024, -1)), protocols.Item("b", twin[n:])], step)
        same = same and torch.equal(bucket, twin)
    return {"largest": largest, "buffers": buffers, "model_bytes": 4 * (n + 1000), "same": same}
