"""The DDP hook's path is short in Python too: one DDP step with Top-1% + error feedback makes
at most twice the Python calls of one with PyTorch's fp16_compress_hook, counted in the same
run on 2 gloo ranks (every thread: milktea's communication thread too). Before the codec
interface over rows it was about 7 times (1027 calls against 142)."""
import pytest

import hook_calls

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


def test_a_top_k_step_costs_at_most_twice_the_python_calls_of_the_fp16_hook(ranks):
    for rank, res in enumerate(ranks(2).run(hook_calls.both, results="all", timeout=240)):
        fp16, topk = res["fp16"]["total"], res["topk"]["total"]
        assert fp16 > 50, res["fp16"]          # the count saw the step (forward, backward, optimizer)
        assert topk <= 2 * fp16, (rank, topk, fp16, res["topk"]["top"])
