"""One error-feedback default everywhere: a compressor that declares itself `biased` gets a
ledger, an unbiased one does not, unless the caller says True or False (milktea.ledger.use_ledger)."""
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from compressor_zoo import ZOO
from milktea import QSGD, Quadratic, Quantize, Sign, TopK
from milktea.simulate import simulate
from milktea.distributed import hooks, schemes
from milktea.ledger import use_ledger


@pytest.fixture(scope="module")
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_rule_is_the_compressors_own_word():
    for name, make in ZOO.items():
        c = make()
        assert use_ledger(c) is c.biased, name
        assert use_ledger(c, True) is True and use_ledger(c, False) is False
    assert use_ledger(None) is False
    assert use_ledger(Quantize(8)) and not use_ledger(Quantize(8, stochastic=True))
    with pytest.raises(TypeError, match="True, False or None"):
        use_ledger(TopK(0.1), 1)


def test_simulate_follows_it():
    run = dict(workers=2, steps=2, progress=False, device="cpu")
    for comp, ef in ((TopK(0.1), True), (Sign(), True), (QSGD(), False), (None, False)):
        h = simulate(Quadratic(100), comp, **run)
        assert h.config["error_feedback"] is ef and ("+ef" in h.scheme) is (ef and comp is not None)
    assert simulate(Quadratic(100), QSGD(), error_feedback=True, **run).config["error_feedback"] is True
    assert simulate(Quadratic(100), TopK(0.1), error_feedback=False, **run).config["error_feedback"] is False


def test_the_hook_and_registered_schemes_follow_it(group):
    def net():
        return torch.nn.Linear(40, 40)
    for comp, ef in ((TopK(0.1), True), (QSGD(), False), (None, False)):
        state = hooks.compress(DDP(net()), comp)
        try:
            assert state.error_feedback is ef
        finally:
            state.close()
    state = hooks.compress(DDP(net()), QSGD(), error_feedback=True)
    state.close()
    assert state.error_feedback is True
    for comp in (TopK(0.05), QSGD()):
        name = schemes.register("mine-default", comp)
        try:
            assert schemes.uses_ledger(name) is comp.biased
            assert schemes.label(name).endswith("+EF") is comp.biased
        finally:
            schemes.unregister(name)


def test_the_built_in_schemes_say_theirs_in_their_label():
    """Built-in schemes are named configurations, each with its choice in its label (int8
    runs without a ledger though round-to-nearest is biased: its error is below the noise)."""
    for name in schemes.BUILTIN:
        if name != "dense":
            assert ("+EF" in schemes.label(name)) is schemes.uses_ledger(name), name
