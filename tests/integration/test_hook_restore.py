"""Restarting a hooked run into new processes resumes it bit for bit: step counters, random
streams, ledgers and PowerSGD's warm starts all travel in the per-rank checkpoint
(milktea.ddp.save_checkpoint / load_checkpoint)."""
import os

import pytest
import torch

from milktea import QSGD, Cast, Chain, PowerSGD, Quantize, RandomK, Sign, TernGrad, TopK
from milktea.distributed import launch

import dist_workers as w  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

SPECS = [("topk", TopK(0.1), True), ("topk-approx", TopK(0.1, approximate=True), True),
         ("randomk", RandomK(0.1), True), ("int4-stochastic", Quantize(4, stochastic=True), False),
         ("qsgd", QSGD(4), False), ("terngrad", TernGrad(), False), ("sign", Sign(), True),
         ("topk-int8-stochastic", Chain(TopK(0.1), Quantize(8, stochastic=True)), True),
         ("powersgd", PowerSGD(2), True), ("powersgd-noef", PowerSGD(2), False),
         ("powersgd-batched", PowerSGD(2, batched=True), True), ("fp16", Cast(torch.float16), True),
         ("dense", None, False)]


# Three ranks: every parameter compressed (min_size=0). Packets are decoded and summed in rank
# order, so the all-gather protocol is bit-exact whatever the buckets; an all-reduce's sum of
# three numbers depends on where DDP's bucket puts a parameter (the buckets are laid out
# anew after a restart), as in plain DDP: those agree to rounding.
SPECS3 = [s for s in SPECS if s[0] in ("topk", "qsgd", "powersgd", "fp16")]
SUMMED = {"powersgd", "fp16", "dense"}


@pytest.mark.parametrize("workers", [2, 3])
def test_restart_into_new_processes_is_bit_identical(tmp_path, workers):
    specs, min_size = (SPECS, 1024) if workers == 2 else (SPECS3, 0)
    args = (str(tmp_path), 6, 3, min_size)
    full = launch(w.restart_phase, workers, args=(specs, "full", *args), results="all", timeout=280)
    launch(w.restart_phase, workers, args=(specs, "first", *args), timeout=280)
    assert sorted(os.listdir(tmp_path / "topk")) == [f"rank{r}-of-{workers}.pt" for r in range(workers)]
    second = launch(w.restart_phase, workers, args=(specs, "second", *args), results="all", timeout=280)
    for rank in range(workers):
        for label, _, _ in specs:
            a, b = full[rank][label], second[rank][label]
            assert len(a["grads"]) == len(b["grads"]) == 3
            if label != "dense":
                assert b["compressed"], label           # the first restored step compresses
            for x, y in zip(a["grads"] + [a["weights"]], b["grads"] + [b["weights"]]):
                if workers == 2 or label not in SUMMED:
                    assert torch.equal(x, y), (label, rank, (x - y).abs().max().item())
                else:   # fp16 sums in 16 bits: an order change moves the last bit
                    tol = (1e-3 if label == "fp16" else 1e-5) * x.abs().max().item()
                    assert (x - y).abs().max().item() <= tol, (label, rank, (x - y).abs().max().item())


def test_another_ranks_or_world_sizes_state_is_refused(tmp_path):
    for r in range(3):       # a checkpoint saved by 3 ranks; only the names matter here
        (tmp_path / f"rank{r}-of-3.pt").write_bytes(b"")
    errors = launch(w.load_refusals, 2, args=(str(tmp_path),), timeout=120)
    assert "saved by rank" in errors["rank"] and "load_checkpoint" in errors["rank"]
    assert "no checkpoint for rank 0 of 2" in errors["world"] and "rank0-of-3.pt" in errors["world"]
