"""milktea.local: DiLoCo's optimizers against PyTorch's, the outer step against parameter
averaging and synchronous data parallelism, streaming fragments, compressed reports with
their ledgers, outages, and a run resumed from its state."""
import pytest
import torch

import milktea
from milktea import Digits, ErrorFeedback, PowerSGD, Quadratic, Quantize, TopK
from milktea.local import (SGD, AdamW, DataParallel, DiLoCo, LocalRun, Outage, OuterSGD, simulate,
                           weighted_mean)
from milktea.local.core import Core
from milktea.local.exchange import Reports
from milktea.local.fragments import Schedule, split


def _grid(*shape, seed=0):
    """float32 values on a grid of 2^-20 in [-1, 1): sums of a few of them, and halving
    them, are exact, so float32 arithmetic equals real arithmetic on them."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(1 << 20), 1 << 20, shape, generator=g).float() / (1 << 20)


# --- the optimizers, one row at a time, are PyTorch's -------------------------------------
@pytest.mark.parametrize("inner,torch_opt", [
    (AdamW(lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1),
     lambda p: torch.optim.AdamW([p], lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)),
    (SGD(lr=0.1, momentum=0.9), lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, foreach=False)),
    (SGD(lr=0.1), lambda p: torch.optim.SGD([p], lr=0.1, foreach=False))])
def test_inner_optimizer_rows_equal_torch_bit_for_bit(inner, torch_opt):
    torch.manual_seed(0)
    rows = torch.randn(3, 50)
    refs = [torch.nn.Parameter(r.clone()) for r in rows]
    opts = [torch_opt(p) for p in refs]
    state = inner.start(rows)
    for step in range(6):
        grads = torch.randn(3, 50)
        active = [0, 2] if step in (2, 3) else None       # worker 1 away for two steps
        inner.step(rows, grads, state, active=active)
        for w in (active or range(3)):
            refs[w].grad = grads[w].clone()
            opts[w].step()
    for w in range(3):
        assert torch.equal(rows[w], refs[w].detach())
    assert state["step"] == [6, 4, 6]


@pytest.mark.parametrize("momentum,nesterov", [(0.9, True), (0.9, False), (0.0, False)])
def test_outer_sgd_is_torch_sgd_on_the_pseudo_gradient(momentum, nesterov):
    torch.manual_seed(1)
    theta = torch.randn(40)
    ref = torch.nn.Parameter(theta.clone())
    opt = torch.optim.SGD([ref], lr=0.7, momentum=momentum, nesterov=nesterov, foreach=False)
    outer, state = OuterSGD(lr=0.7, momentum=momentum, nesterov=nesterov), {}
    for _ in range(5):
        delta = torch.randn(40)
        outer.step(theta, delta, state)
        ref.grad = delta.clone()
        opt.step()
    assert torch.equal(theta, ref.detach())


# --- the outer step's sign: lr 1 without momentum is parameter averaging ------------------
def _core(scheme, n=12, workers=4, sizes=None):
    theta = _grid(n, seed=9)
    sizes = sizes or [("w", n)]
    return Core(scheme, theta, split(sizes, scheme.fragments), list(range(workers)))


def _train_rows(core, seed):
    """Stand-in for H inner steps: every worker's parameters move to new grid values."""
    core.rows.copy_(_grid(*core.rows.shape, seed=seed))
    for i in range(len(core.ranks)):
        core.add_tokens(i, 100)


def test_outer_sgd_lr1_without_momentum_is_parameter_averaging_bit_for_bit():
    core = _core(DiLoCo(inner_steps=1, outer=OuterSGD(lr=1.0, momentum=0.0)))
    for k in range(3):
        _train_rows(core, seed=k)
        average = core.rows.sum(0) / 4                     # exact on the grid
        core.after_inner_step()
        assert torch.equal(core.theta, average)
        assert all(torch.equal(r, average) for r in core.rows)   # every worker gets it back


def test_outer_step_moves_toward_the_workers():
    core = _core(DiLoCo(inner_steps=1, outer=OuterSGD(lr=0.5, momentum=0.0)))
    before = core.theta.clone()
    _train_rows(core, seed=3)
    average = core.rows.sum(0) / 4
    core.after_inner_step()
    assert torch.equal(core.theta, before + 0.5 * (average - before))   # halfway, not away


def test_one_inner_step_with_outer_lr1_is_synchronous_data_parallel():
    task = Digits(hidden=16)
    kw = dict(workers=4, steps=30, batch=16, seed=3)
    local = simulate(task, DiLoCo(inner_steps=1, inner=SGD(lr=0.2), outer=OuterSGD(lr=1.0, momentum=0.0)),
                     eval_every=10, **kw)
    sync = milktea.simulate.simulate(task, None, lr=0.2, momentum=0.0, eval_every=10, progress=False, device="cpu", **kw)
    dp = simulate(task, DataParallel(SGD(lr=0.2)), eval_every=10, **kw)
    assert local.eval_steps == sync.eval_steps == dp.eval_steps
    for run in (local, dp):          # the same batches and steps: equal up to float rounding
        assert run.evals["loss"] == pytest.approx(sync.evals["loss"], rel=1e-5)
        assert run.loss == pytest.approx(sync.loss, rel=1e-5)
    assert local.loss[-1] < local.loss[0] * 0.5


# --- streaming: fragments, overlap, mixing ------------------------------------------------
def test_fragments_are_runs_of_whole_tensors_balanced_by_size():
    sizes = [("a", 10), ("b", 10), ("c", 30), ("d", 5), ("e", 5)]
    assert split(sizes, 1) == [slice(0, 60)]
    assert split(sizes, 2) == [slice(0, 20), slice(20, 60)]
    assert split(sizes, 5) == [slice(0, 10), slice(10, 20), slice(20, 50), slice(50, 55), slice(55, 60)]
    with pytest.raises(ValueError, match="does not divide the model.*5 parameter tensors"):
        split(sizes, 6)


def test_each_fragment_is_sent_every_H_steps_in_turn_and_lands_tau_later():
    s = Schedule(inner_steps=6, fragments=3, overlap=1)
    sends = {t: s.sends(t) for t in range(1, 13) if s.sends(t)}
    assert sends == {2: [0], 4: [1], 6: [2], 8: [0], 10: [1], 12: [2]}
    assert {t: s.lands(t) for t in range(1, 14) if s.lands(t)} == {t + 1: f for t, f in sends.items()}


def test_streaming_exchange_lands_later_and_mixes_with_alpha():
    scheme = DiLoCo(inner_steps=4, fragments=2, overlap=1, alpha=0.25, outer=OuterSGD(lr=1.0, momentum=0.0))
    core = _core(scheme, sizes=[("a", 6), ("b", 6)])
    _train_rows(core, seed=5)
    core.after_inner_step()                                  # t = 1: nothing due
    assert not core.pending
    average = core.rows[:, :6].sum(0) / 4
    core.after_inner_step()                                  # t = 2: fragment 0 is sent
    assert torch.equal(core.theta[:6], average) and list(core.pending) == [0]
    assert core.sent_now == [24] * 4                         # 6 fp32 values each: half the model
    _train_rows(core, seed=6)                                # training goes on meanwhile
    local = core.rows[:, :6].clone()
    core.after_inner_step()                                  # t = 3: it lands, mixed with alpha
    assert torch.allclose(core.rows[:, :6], 0.25 * local + 0.75 * average, rtol=0, atol=1e-7)
    assert not core.pending


# --- compressed reports --------------------------------------------------------------------
def test_reports_bytes_are_the_packets_and_the_ledger_keeps_the_rest():
    torch.manual_seed(2)
    ex = Reports(TopK(ratio=0.02), feedback=True, workers=[0], fragments=1)
    fed, sent = torch.zeros(500), torch.zeros(500)
    for _ in range(5):
        delta = torch.randn(500)
        packet, nbytes = ex.send(0, 0, delta)
        assert nbytes == len(packet.to_bytes())
        fed += delta
        sent += ex.decode(packet)
    assert torch.allclose(sent + ex.ledger(0, 0), fed, atol=1e-5)


def test_int8_reports_are_a_quarter_of_fp32_and_training_still_works():
    h = simulate(Digits(hidden=16), DiLoCo(inner_steps=5, inner=SGD(lr=0.2), compressor=Quantize(bits=8, chunk=None)),
                 workers=4, steps=50, batch=16)
    assert h.outer_steps == 10
    assert 19.5 < h.ratio < 20                  # 5 steps x fp32 / (1 byte + header and one scale)
    assert sum(1 for b in h.bytes_sent if any(b)) == 10   # bytes only on exchange steps
    assert h.final("accuracy") > 0.7


def test_weighted_mean_weighs_by_tokens():
    xs = [torch.tensor([1.0, 0.0]), torch.tensor([4.0, 3.0])]
    assert torch.equal(weighted_mean(xs, [1, 2]), torch.tensor([3.0, 2.0]))
    assert torch.equal(weighted_mean(xs, [5, 5]), torch.tensor([2.5, 1.5]))
    with pytest.raises(ValueError, match="token counts must be > 0"):
        weighted_mean(xs, [0, 1])


# --- a branch goes dark --------------------------------------------------------------------
def test_outage_quorum_and_recovery_from_a_peer():
    scheme = DiLoCo(inner_steps=4, inner=SGD(lr=0.2), compressor=TopK(ratio=0.1))
    run = LocalRun(Digits(hidden=16), scheme, workers=3, batch=16, outages=[Outage(1, 1, 3)])
    heard = []
    for _ in range(4 * 4):
        before = run.core.rows[1].clone()
        step = run.core.t + 1
        run.step()
        if step in (5, 9):                             # closed: worker 1 does not move
            assert torch.equal(run.core.rows[1], before)
        if step == 13:                                 # reopened: it starts from a peer's state
            assert run.core.recovery_bytes > 0
        heard += [ws for t, _, ws in run.core.quorum if t == step]
    assert heard == [[0, 1, 2], [0, 2], [0, 2], [0, 1, 2]]
    assert run.core.reports.ledger(1, 0) is not None


def test_an_outage_does_not_change_the_others_data():
    kw = dict(workers=3, steps=8, batch=16, seed=4)
    scheme = DiLoCo(inner_steps=4, inner=SGD(lr=0.2))
    a = LocalRun(Digits(hidden=16), scheme, **{k: v for k, v in kw.items() if k != "steps"})
    b = LocalRun(Digits(hidden=16), scheme, outages=[Outage(2, 0, 1)], **{k: v for k, v in kw.items() if k != "steps"})
    batches = [(a._batch(), b._batch()) for _ in range(3)]
    assert all(torch.equal(x[0], y[0]) for x, y in batches)


# --- state: stop, save, go on --------------------------------------------------------------
def test_resume_from_state_dict_is_bit_identical(tmp_path):
    scheme = DiLoCo(inner_steps=3, fragments=3, overlap=1, inner=AdamW(lr=3e-3),
                    compressor=Quantize(bits=4, stochastic=True))
    kw = dict(workers=3, batch=8, seed=1, outages=[Outage(0, 1, 2)])
    whole = LocalRun(Digits(hidden=16), scheme, **kw)
    whole.train(12)
    first = LocalRun(Digits(hidden=16), scheme, **kw)
    first.train(7 - 7 % 3 + 3)            # 9 steps: stopped with an exchange in flight
    assert first.core.pending
    torch.save(first.state_dict(), tmp_path / "state.pt")
    second = LocalRun(Digits(hidden=16), scheme, **kw)
    second.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    second.train(3)
    assert torch.equal(second.theta, whole.theta) and torch.equal(second.core.rows, whole.core.rows)
    assert second.history.loss == whole.history.loss
    assert second.history.bytes_sent == whole.history.bytes_sent
    assert second.history.evals == whole.history.evals


# --- bad input, before any training ---------------------------------------------------------
@pytest.mark.parametrize("make,error,words", [
    (lambda: DiLoCo(inner_steps=0), ValueError, "inner_steps H must be >= 1"),
    (lambda: DiLoCo(inner_steps=2.5), TypeError, "inner_steps H must be an int"),
    (lambda: DiLoCo(outer=OuterSGD(lr=0.0)), ValueError, "outer lr must be > 0"),
    (lambda: DiLoCo(outer=OuterSGD(lr=-1.0)), ValueError, "outer lr must be > 0"),
    (lambda: DiLoCo(inner_steps=10, fragments=3), ValueError, "fragments=3 does not divide inner_steps H=10"),
    (lambda: DiLoCo(inner_steps=10, overlap=10), ValueError, "overlap tau=10 must be < inner_steps"),
    (lambda: DiLoCo(compressor=PowerSGD(rank=2)), ValueError, "cannot carry a pseudo-gradient"),
    (lambda: DiLoCo(compressor=ErrorFeedback(TopK(ratio=0.1))), TypeError, "not a ledger"),
    (lambda: DiLoCo(compressor="int8"), TypeError, "must be a milktea Compressor"),
    (lambda: DiLoCo(inner=torch.optim.AdamW), TypeError, "inner must be"),
    (lambda: LocalRun(Quadratic(10), DiLoCo(inner_steps=4, fragments=2)), ValueError,
     "does not divide the model: it has only 1 parameter"),
    (lambda: LocalRun(Digits(hidden=8), DiLoCo(inner_steps=2), workers=2, outages=[Outage(3, 0, 1)]),
     ValueError, "only 2 workers"),
    (lambda: LocalRun(Digits(hidden=8), DiLoCo(inner_steps=2), workers=1, outages=[Outage(0, 0, 1)]),
     ValueError, "every worker is closed"),
    (lambda: LocalRun(Digits(hidden=8), DataParallel(), outages=[Outage(0, 0, 1)]), ValueError,
     "outages are simulated for local steps"),
    (lambda: LocalRun(Digits(hidden=8), DiLoCo(inner_steps=4)).train(6), ValueError,
     "not a multiple of inner_steps"),
])
def test_bad_settings_are_refused_before_training(make, error, words):
    with pytest.raises(error, match=words):
        make()
