"""Every misconception of chapter 07 is contradicted by its own computation."""
import doctest

import pytest
import torch

from milktea.experiments import misconceptions as m


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("check", m.ALL, ids=lambda f: f.__name__)
def test_busted(check):
    v = check()
    assert v.busted, v.text
    assert v.claim and v.text and v.numbers
    assert v._repr_markdown_().startswith("**Busted.**")


def test_ratio_is_speedup_by_hand():
    v = m.ratio_is_speedup(workers=64, ratio=0.01)
    # all-reduce 2(N-1)/N M vs all-gather (N-1) M/R: speedup = 2R/N (latency aside)
    assert v.numbers["comm speedup"] == pytest.approx(2 * v.numbers["R"] / 64, rel=0.05)


def test_docstrings():
    assert doctest.testmod(m).failed == 0


def test_compression_pays_is_judged_with_a_gpu_codec_too():
    v = m.compression_always_pays()
    assert len(v.numbers["fast"]) == 2 and any("GPU" in k for k in v.numbers["fast"])
    # a memory-bound GPU codec is far cheaper than this CPU's, so it loses less on the fast link
    gpu = next(k for k in v.numbers["fast"] if "GPU" in k)
    cpu = next(k for k in v.numbers["fast"] if "GPU" not in k)
    assert v.numbers["codec s"][gpu] < v.numbers["codec s"][cpu]
    assert v.numbers["fast"][gpu] >= v.numbers["fast"][cpu]
