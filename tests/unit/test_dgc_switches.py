"""DGC's four techniques can be switched off one at a time; each switch does what it says,
checked against a plain float64 re-implementation of the DGC update."""
import pytest
import torch

from milktea import DGC, ErrorFeedback, TopK


def _grads(n=6, d=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(d, generator=g) * (1 + 3 * (i % 2)) for i in range(n)]


def _reference(grads, k, momentum, correction, masking, clip):
    """DGC written out with numpy-like float64 operations, exact Top-k."""
    d = grads[0].numel()
    u = torch.zeros(d, dtype=torch.float64)
    v = torch.zeros(d, dtype=torch.float64)
    sent = []
    for g in grads:
        g = g.double()
        if clip is not None and g.norm() > clip:
            g = g * (clip / g.norm())
        if correction:
            u = momentum * u + g
            v = v + u
        else:
            v = v + g
        idx = v.abs().topk(k).indices
        out = torch.zeros(d, dtype=torch.float64)
        out[idx] = v[idx]
        v[idx] = 0
        if correction and masking:
            u[idx] = 0
        sent.append(out)
    return sent


@pytest.mark.parametrize("correction,masking,clip", [(True, True, None), (True, False, None),
                                                     (False, True, None), (True, True, 2.0),
                                                     (False, False, 1.5)])
def test_each_switch_matches_the_written_out_update(correction, masking, clip):
    grads = _grads()
    dgc = DGC(ratio=0.1, momentum=0.9, approximate=False, momentum_correction=correction,
              masking=masking, clip=clip)
    want = _reference(grads, 5, 0.9, correction, masking, clip)
    for g, w in zip(grads, want):
        got = dgc.decompress(dgc.compress(g))
        torch.testing.assert_close(got.double(), w, rtol=1e-5, atol=1e-5)


def test_masking_changes_the_updates():
    grads = _grads(n=8)
    a = DGC(ratio=0.1, approximate=False, masking=True)
    b = DGC(ratio=0.1, approximate=False, masking=False)
    diff = [float((a.decompress(a.compress(g)) - b.decompress(b.compress(g))).abs().max()) for g in grads]
    assert diff[0] == 0 and max(diff) > 0.1      # same first step, then the stale velocity shows


def test_without_momentum_correction_it_is_the_plain_ledger():
    grads = _grads()
    dgc = DGC(ratio=0.1, approximate=False, momentum_correction=False)
    ef = ErrorFeedback(TopK(ratio=0.1))
    for g in grads:
        assert torch.equal(dgc.decompress(dgc.compress(g)), ef.decompress(ef.compress(g)))
    assert dgc.velocity is None


def test_clip_bounds_what_enters_the_ledger():
    dgc = DGC(ratio=1.0, momentum=0.0, approximate=False, clip=1.0)
    out = dgc.decompress(dgc.compress(torch.tensor([3.0, 4.0])))
    torch.testing.assert_close(out, torch.tensor([0.6, 0.8]))
    small = DGC(ratio=1.0, momentum=0.0, approximate=False, clip=10.0)
    assert torch.equal(small.decompress(small.compress(torch.tensor([3.0, 4.0]))), torch.tensor([3.0, 4.0]))


@pytest.mark.parametrize("kwargs,err", [(dict(clip=0.0), ValueError), (dict(clip=float("nan")), ValueError),
                                        (dict(clip=True), TypeError), (dict(masking="yes"), TypeError),
                                        (dict(momentum_correction=1), TypeError),
                                        (dict(warmup_steps=-1), ValueError), (dict(momentum=1.0), ValueError)])
def test_bad_settings_say_what_to_change(kwargs, err):
    with pytest.raises(err):
        DGC(ratio=0.1, **kwargs)


def test_repr_names_the_switches():
    text = repr(DGC(ratio=0.01, clip=2.0, masking=False))
    assert "masking=False" in text and "clip=2.0" in text and "momentum_correction=True" in text
