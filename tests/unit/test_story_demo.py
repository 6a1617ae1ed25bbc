"""The story's demo (60 steps, 1000 parameters, k=100, lr 0.1, numpy seed 42) re-run
through the library, checked against a direct numpy transcription of its algorithm."""
import numpy as np
import pytest
import torch

from milktea.compressors import TopK
from milktea.experiments.ledger import story_demo


def numpy_reference(steps=60, n=1000, k=100, lr=0.1, seed=42):
    np.random.seed(seed)
    optimal = np.random.randn(n)
    w_dense, w_sparse, ledger = np.zeros(n), np.zeros(n), np.zeros(n)
    for _ in range(steps):
        w_dense -= lr * (w_dense - optimal)
        c = (w_sparse - optimal) + ledger
        keep = np.abs(c) >= np.partition(np.abs(c), -k)[-k]
        sent = np.where(keep, c, 0.0)
        ledger = c - sent
        w_sparse -= lr * sent
    return np.linalg.norm(w_dense - optimal), np.linalg.norm(w_sparse - optimal)


@pytest.fixture(scope="module")
def demo():
    return story_demo()


def test_reproduces_the_story_errors(demo):
    dense, sparse = numpy_reference()
    assert demo.dense_error == pytest.approx(dense, rel=1e-4)
    assert demo.topk_ef_error == pytest.approx(sparse, rel=1e-4)
    assert round(demo.dense_error, 4) == 0.0556
    assert round(demo.topk_ef_error, 4) == 0.0119
    # without the ledger the same Top-K is stuck far away
    assert demo.topk_error > 100 * demo.topk_ef_error


def test_wire_ratio_is_the_packets_real_bytes(demo):
    assert demo.story_ratio == 8.0                       # its 4-byte value + 1-byte index estimate
    # 100 float32 values, plus indices no dearer than plain int32 ones (the encoder picks the smallest)
    worst = TopK(k=100, index="int32").compress(torch.randn(1000)).nbytes
    assert all(len(b) == 1 and 400 < b[0] < worst for b in demo.topk_ef.bytes_sent)
    sent = sum(b[0] for b in demo.topk_ef.bytes_sent)
    assert demo.wire_ratio == pytest.approx(60 * 1000 * 4 / sent)
    assert 6 < demo.wire_ratio < demo.story_ratio       # headers and index escapes cost a little
    assert demo.dense.dense_bytes == 4000
    text = repr(demo)
    assert "0.0556" in text and "0.0119" in text and f"{demo.wire_ratio:.2f}x" in text


def test_float64_run_agrees():
    d = story_demo(dtype=torch.float64)
    dense, sparse = numpy_reference()
    assert d.dense_error == pytest.approx(dense, rel=1e-12)
    assert d.topk_ef_error == pytest.approx(sparse, rel=1e-9)
