"""Bad input, the last of it: one non-finite policy for every compressor, large finite
half-precision values, float settings, mixed packets, the random stream across a resume,
stray codes on the wire and links that make no sense."""
import io

import pytest
import torch

from milktea import QSGD, Cast, Chain, ErrorFeedback, Quantize, TernGrad, TopK, kernels
from milktea.bits import pack, unpack
from milktea.cost import (Link, allgather_time, compressed_allreduce_time, parameter_server_time,
                          ring_allreduce_time)
from milktea.packet import Packet

from compressor_zoo import ZOO, make_input

BAD = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def poisoned(name, value, dtype=torch.float32):
    """The zoo's input with one non-finite entry, early enough to share a chunk with others."""
    x = make_input(name, dtype=dtype).contiguous()
    x.view(-1)[7] = value
    return x


# -- one policy: a finite entry never decodes to a non-finite value ---------------------
@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("name", sorted(ZOO))
def test_ignore_passes_nonfinite_through_or_is_refused(name, bad):
    kind = type(ZOO[name]())
    try:
        comp = ZOO[name](nonfinite="ignore")
    except ValueError as err:      # its packets cannot carry NaN or inf: refused when built
        assert not kind.carries_nonfinite and "nonfinite='raise'" in str(err) and "'zero'" in str(err)
        return
    assert comp.carries_nonfinite
    x = poisoned(name, BAD[bad])
    try:
        out = comp.decompress(comp.compress(x))
    except ValueError as err:      # a chain's second stage refuses the values it cannot carry
        assert name.startswith("topk+") and "non-finite" in str(err)
        return
    finite = torch.isfinite(x)
    assert bool(torch.isfinite(out[finite]).all())               # the neighbours stay finite
    # what the packet can carry, it carries: dense and cast values, a sparse packet's values
    if name != "randomk":          # (RandomK's positions may not include it)
        got = out.reshape(-1)[7].item()
        assert got != got if bad == "nan" else got == BAD[bad]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_raise_and_zero_policies_for_every_compressor(name):
    x = poisoned(name, float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        ZOO[name]().compress(x)
    with pytest.raises(ValueError, match="non-finite"):           # and through error feedback
        ErrorFeedback(ZOO[name]()).compress(x)
    clean = x.clone()
    clean.view(-1)[7] = 0.0
    assert ZOO[name](nonfinite="zero").compress(x) == ZOO[name]().compress(clean)   # as if it were 0


def test_cast_float16_never_turns_a_finite_entry_infinite():
    x = torch.tensor([1.0, 7e4, float("inf")])
    for policy in ("raise", "zero", "ignore"):
        with pytest.raises(ValueError, match="float16's range"):
            Cast(torch.float16, nonfinite=policy).compress(x if policy == "ignore" else x[:2])
    ok = Cast(torch.float16, nonfinite="ignore").compress(torch.tensor([1.0, float("inf")]))
    assert Cast().decompress(ok).tolist() == [1.0, float("inf")]
    ef = ErrorFeedback(Cast(torch.float16, nonfinite="ignore"))    # the ledger refuses it before adding
    with pytest.raises(ValueError, match="left unchanged"):
        ef.compress(torch.tensor([1.0, 7e4, float("nan")]))


# -- large finite half-precision input ---------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("make", [lambda: QSGD(levels=4), lambda: QSGD(levels=3, chunk=None),
                                  lambda: QSGD(levels=127), TernGrad])
def test_qsgd_half_precision_at_the_top_of_its_range_decodes_finite(make, dtype):
    top = torch.finfo(dtype).max
    x = torch.full((1000,), 6e4 if dtype == torch.float16 else top / 2, dtype=dtype)
    x[::2] *= -1
    x[5] = top
    comp = make()
    trials = torch.stack([comp.decompress(comp.compress(x)).double() for _ in range(200)])
    assert bool(torch.isfinite(trials).all())
    # still unbiased: float16's norm is capped at 65504, never below max|x|; bfloat16's, as
    # float32's, saturates at half float32's largest value, below x[5] (which comes back smaller)
    keep = torch.arange(1000) != (5 if dtype == torch.bfloat16 else -1)
    ratio = (trials.mean(0) / x.double())[keep]                      # 1 on average per entry
    assert abs(float(ratio.mean()) - 1) < 0.02


# -- settings that are not what they look like -----------------------------------------
@pytest.mark.parametrize("make", [lambda: Quantize(bits=8.0), lambda: Quantize(bits=True),
                                  lambda: QSGD(levels=4.0), lambda: Quantize(seed=0.5),
                                  lambda: QSGD(seed="1")])
def test_float_where_an_int_is_meant_is_refused(make):
    with pytest.raises(TypeError, match="must be an int"):
        make()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_aggregate_refuses_packets_of_different_dtypes_or_shapes(name):
    comp = ZOO[name]()
    a = comp.compress(make_input(name))
    with pytest.raises(ValueError, match="packets disagree"):
        comp.aggregate([a, comp.compress(make_input(name, dtype=torch.float64))])
    x = make_input(name)
    with pytest.raises(ValueError, match="packets disagree"):
        comp.aggregate([a, comp.compress(x.reshape(-1)[:x.numel() // 2].reshape(-1, 5).contiguous())])
    with pytest.raises(TypeError, match="Packets"):
        comp.aggregate([a, "not a packet"])


# -- the random stream in state_dict: a resumed run sends what the uninterrupted one would ----
@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("feedback", [False, True])
def test_resume_sends_the_uninterrupted_runs_packets(name, feedback):
    wrap = ErrorFeedback if feedback else (lambda c: c)
    run = wrap(ZOO[name]())
    inputs = [make_input(name, seed=s) for s in range(4)]
    for x in inputs[:2]:
        run.compress(x)
    saved = io.BytesIO()
    torch.save(run.state_dict(), saved)                           # through a file, as a checkpoint
    later = [run.compress(x) for x in inputs[2:]]
    resumed = wrap(ZOO[name]())
    saved.seek(0)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert [resumed.compress(x) for x in inputs[2:]] == later      # bit for bit


def test_stochastic_compressors_keep_their_generator_in_state_dict():
    for comp in (QSGD(), TernGrad(), Quantize(bits=4, stochastic=True)):
        assert isinstance(comp.state_dict()["generator"], torch.Tensor)
    chain = Chain(TopK(ratio=0.1), Quantize(bits=4, stochastic=True))
    assert isinstance(chain.state_dict()["second"]["generator"], torch.Tensor)
    with pytest.raises(ValueError, match="random generator"):
        Cast().load_state_dict(QSGD().state_dict())                # a state of another kind
    with pytest.raises(ValueError, match="random generator"):
        QSGD().load_state_dict({})
    with pytest.raises(ValueError, match="CPU generator"):
        QSGD().load_state_dict({"generator": torch.zeros(3, dtype=torch.uint8)})


# -- stray codes on the wire -----------------------------------------------------------
# one worker runs them all: on a cold cache their first case compiles the stochastic codecs'
# loops (about 20 CPU seconds), which a second worker would otherwise wait for at the same time
@pytest.mark.xdist_group("stochastic-loops")
@pytest.mark.parametrize("path", ["numba", "torch"])
@pytest.mark.parametrize("make", [lambda: QSGD(levels=4), lambda: QSGD(levels=5, chunk=64), TernGrad])
def test_level_codes_above_twice_the_levels_are_refused(make, path, monkeypatch):
    if path == "torch":
        monkeypatch.setattr(kernels, "USE_NUMBA", False)
    comp = make()
    n = 70_000 if path == "numba" else 300
    p = comp.compress(torch.randn(n, generator=torch.Generator().manual_seed(0)))
    s, bits, _ = p.params
    codes = unpack(p.parts[0], bits, n).clone()
    codes[n - 3] = 2 * s + 1                                      # one stray code, near the end
    bad = Packet(p.codec, p.shape, p.dtype, p.params, (pack(codes, bits), p.parts[1]))
    with pytest.raises(ValueError, match=f"above 2 \\* levels = {2 * s}"):
        comp.decompress(bad)
    with pytest.raises(ValueError, match="above 2"):
        comp.decompress_add(bad, torch.zeros(n))
    with pytest.raises(ValueError, match="above 2"):                 # as it arrives from the wire
        comp.decompress(Packet.from_bytes(bad.to_bytes()))


# -- links that make no sense ----------------------------------------------------------
@pytest.mark.parametrize("link", [Link(1e-320, 0.0), Link(1e9, 1e308), Link(5e-324, 1e-6)])
def test_an_absurd_link_is_refused_not_priced_at_infinity(link):
    for price in (lambda: ring_allreduce_time(1e9, 8, link), lambda: allgather_time(1e9, 8, link),
                  lambda: parameter_server_time(1e9, 8, link), lambda: compressed_allreduce_time(1e9, 8, link)):
        with pytest.raises(ValueError, match="infinite time.*bytes per second"):
            price()
    assert ring_allreduce_time(1e9, 1, link) == 0.0                # one worker sends nothing
    with pytest.raises(ValueError, match="infinite time"):
        Link(1e-320).transfer_time(1e9)
