"""The DDP hook beside everything else that issues collectives during backward, under
re-bucketing, unused parameters and gradient accumulation, on 2 and 3 gloo ranks.

Each scenario trains a few steps with Top-K+EF (all-gather), PowerSGD+EF (low rank),
fp16+EF (all-reduce) and dense, and checks that nothing is lost: per parameter, what DDP
applied plus the ranks' ledgers equals the mean of every gradient computed (float
tolerance), and dense is the exact mean. A collective-order mismatch would abort or hang
the launch instead."""

import pytest
import torch

from milktea import Cast, PowerSGD, TopK

import dist_workers as w  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

KINDS = ("find_unused", "two_models", "user_allreduce", "static_graph", "no_sync")
SPECS = [("topk", TopK(0.1), True), ("powersgd", PowerSGD(2), True), ("fp16", Cast(torch.float16), True),
         ("dense", None, False)]
TOLERANCE = {"topk": 1e-5, "powersgd": 1e-4, "fp16": 5e-3, "dense": 1e-6}



@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def results(request, ranks):
    out = ranks(request.param).run(_run_all, timeout=550)
    return request.param, out


def _run_all():
    return {kind: w.scenario(kind, SPECS) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_is_lost(results, kind):
    workers, out = results
    for label, res in out[kind].items():
        assert res["rel_err"] <= TOLERANCE[label], (kind, workers, label, res)
        assert res["threads_left"] == [], res        # close() joined the communication thread
        if label == "dense":
            assert res["dense_err"] <= 1e-6, (kind, label, res)
        else:
            assert res["compressed"], (kind, label, res)
        if kind == "user_allreduce":      # the user's all-reduce got the user's numbers
            assert res["user_allreduce"] == [workers * (workers + 1) / 2], res


def test_static_graph_rebuilds_buckets_and_the_plans_follow(results):
    _, out = results
    # DDP rebuilds its buckets after the second step: the hook made a plan for each layout
    res = out["static_graph"]["topk"]
    assert res["plans"] > res["buckets"], res
