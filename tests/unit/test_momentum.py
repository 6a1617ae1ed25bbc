"""Momentum correction around a DDP hook: velocities by parameter name, so that around a dense
all-reduce it is momentum SGD bit for bit, through DDP's bucket rebuild, and resumes exactly.

DDP runs here on a one-rank gloo group in this process (no process is started): the buckets,
their rebuild after the first step and the hook calls are DDP's own."""
import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from milktea import DGC, MomentumCorrected, Sign, TopK
from milktea.distributed import hooks, schemes
from milktea.distributed.momentum import MomentumCorrection, call
from milktea.velocity import Velocity


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _net():
    torch.manual_seed(0)   # 3 layers, 6 parameters of 4 shapes (two of them alike: a velocity may not land there)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 16))


def _batches(steps):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 16, generator=g)) for _ in range(steps)]


def _train(model, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _momentum_sgd(batches, cap, **ddp):
    model = DDP(_net(), bucket_cap_mb=cap, **ddp)
    return _train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), batches)


class _Layouts:
    """An all-reduce hook that records which parameters each bucket index held, per step."""

    def __init__(self, model):
        self.names = {id(p): n for n, p in model.module.named_parameters()}
        self.seen: list[dict] = [{}]

    def __call__(self, bucket):
        self.seen[-1][bucket.index()] = tuple(self.names[id(p)] for p in bucket.parameters())
        if bucket.is_last():
            self.seen.append({})
        return default_hooks.allreduce_hook(None, bucket)


# bucket caps: one parameter per bucket, a few parameters per bucket, everything in one
@pytest.mark.parametrize("cap", [1e-6, 1.2e-3, 25.0])
@pytest.mark.parametrize("static_graph", [False, True])
def test_around_a_dense_allreduce_it_is_momentum_sgd_bit_for_bit(group, cap, static_graph):
    batches = _batches(6)
    model = DDP(_net(), bucket_cap_mb=cap, static_graph=static_graph)
    layouts = _Layouts(model)
    model.register_comm_hook(MomentumCorrection(model, 0.9, inner=layouts), call)
    got = _train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0), batches)
    want = _momentum_sgd(batches, cap, static_graph=static_graph)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert layouts.seen[0] != layouts.seen[-2]             # DDP did rebuild its buckets on the way


def test_milktea_hook_keeps_the_velocities_and_resumes_them_bit_for_bit(group):
    batches = _batches(6)
    model = DDP(_net(), bucket_cap_mb=1.2e-3)
    state = hooks.compress(model, None, momentum=0.9)      # dense through milktea's own hook
    try:
        got = _train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    finally:
        state.close()
    assert all(torch.equal(a, b) for a, b in zip(got, _momentum_sgd(batches, 1.2e-3)))

    def run(steps, saved=None):   # Top-K with its ledger and the velocities, stopped and resumed
        m = DDP(_net(), bucket_cap_mb=1.2e-3)
        st = hooks.compress(m, TopK(0.1), error_feedback=True, momentum=0.9, min_size=16)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        try:
            if saved is not None:
                m.module.load_state_dict(saved[0])
                opt.load_state_dict(saved[1])
                st.load_state_dict(saved[2])
            params = _train(m, opt, steps)
            return params, (m.module.state_dict(), opt.state_dict(), st.state_dict())
        finally:
            st.close()

    whole, _ = run(batches)
    _, saved = run(batches[:3])
    assert set(saved[2]["momentum"]["velocity"]) == {n for n, _ in _net().named_parameters()}
    assert all(v["tensor"].dtype == torch.float32 for v in saved[2]["momentum"]["velocity"].values())
    resumed, _ = run(batches[3:], saved)
    assert all(torch.equal(a, b) for a, b in zip(whole, resumed))
    with pytest.raises(ValueError, match="momentum="):
        m = DDP(_net())
        st = hooks.compress(m, TopK(0.1), error_feedback=True)
        try:
            st.load_state_dict(saved[2])
        finally:
            st.close()


def test_the_corrected_schemes_run_the_hook_with_its_velocities(group):
    for name in schemes.MOMENTUM_CORRECTED:
        assert schemes.corrects_momentum(name) and schemes.uses_ledger(name) and name in schemes.SCHEMES
        handle = schemes.build(name, DDP(_net()), momentum=0.8)
        try:
            assert handle.state.momentum is not None and handle.state.momentum.momentum == 0.8
        finally:
            handle.close()
    assert not schemes.corrects_momentum("dense")


def test_the_wrapper_saves_by_name_and_refuses_what_is_not_its_model():
    net = _net()
    names = [n for n, _ in net.named_parameters()]

    class Bucket:
        def __init__(self, params, g):
            self.params, self.g = params, g

        def buffer(self):
            return self.g

        def parameters(self):
            return self.params

    mc = MomentumCorrection(net, 0.5, inner=lambda b: b.buffer().clone())
    p = list(net.parameters())
    mc(Bucket(p[:2], torch.ones(p[0].numel() + p[1].numel(), dtype=torch.bfloat16)))
    out = mc(Bucket(p[:2], torch.ones(p[0].numel() + p[1].numel(), dtype=torch.bfloat16)))
    assert out.dtype == torch.bfloat16 and out.tolist() == [1.5] * out.numel()
    assert mc.velocity[names[0]].tensor.dtype == torch.float32
    other = MomentumCorrection(_net(), 0.1)
    other.load_state_dict(mc.state_dict())
    assert other.momentum == 0.5 and torch.equal(other.velocity[names[1]].tensor, 1.5 * torch.ones(16))
    with pytest.raises(ValueError, match="not the model's"):
        mc.correct(Bucket([torch.nn.Parameter(torch.ones(2))], torch.ones(2)))
    with pytest.raises(ValueError, match="does not have"):
        MomentumCorrection(torch.nn.Linear(1, 1), 0.5).load_state_dict(mc.state_dict())
    with pytest.raises(TypeError, match="callable"):
        MomentumCorrection(net, 0.9, inner=3)
    with pytest.raises(TypeError, match="model"):
        MomentumCorrection(lambda b: None, 0.9)
    with pytest.raises(ValueError):
        MomentumCorrection(net, 1.0)


def test_the_simulator_keeps_the_same_velocity():
    """DGC and MomentumCorrected step one Velocity: u <- m u + g in float32, the ledger fed with u."""
    grads = [torch.randn(40, generator=torch.Generator().manual_seed(i)).bfloat16() for i in range(5)]
    u = Velocity(0.9)
    dgc = DGC(ratio=0.1, momentum=0.9, approximate=False, masking=False)
    mcs = MomentumCorrected(Sign(), momentum=0.9)
    for g in grads:
        want = u.step(g)
        dgc.compress(g), mcs.compress(g)
        assert torch.equal(dgc.velocity, want) and torch.equal(mcs.velocity, want)
    assert want.dtype == torch.float32
    restored = MomentumCorrected(Sign(), momentum=0.1)
    restored.load_state_dict(mcs.state_dict())
    assert restored.momentum_state.momentum == 0.9 and torch.equal(restored.velocity, want)
    dgc.reset()
    assert dgc.velocity is None
