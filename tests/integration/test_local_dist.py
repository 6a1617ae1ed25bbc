"""milktea.local on real processes: the same run as the simulator's, a rank that dies
named while the others save their state and stop, a resume from those files (one from a
peer's), and a simulated run resumed in a fresh interpreter, bit for bit."""
import os
import subprocess
import sys
import time

import pytest
import torch

from milktea import Digits, Quantize, TopK
from milktea.distributed import WorkerError, launch
from milktea.local import SGD, AdamW, DiLoCo, LocalRun, Outage
from milktea.local.dist import RunConfig, train
import local_workers  # noqa: E402  (workers import it by this name)

SCHEME = DiLoCo(inner_steps=2, inner=SGD(lr=0.2), compressor=TopK(ratio=0.1))


def test_processes_train_what_the_simulator_trains():
    cfg = RunConfig(task="digits", hidden=16, steps=6, batch=16, seed=2)
    res = launch(train, 2, args=(SCHEME, cfg), timeout=120)
    sim = LocalRun(Digits(hidden=16, seed=2), SCHEME, workers=2, batch=16, seed=2, device="cpu")
    sim.train(6)
    assert res["outer_steps"] == 3
    assert torch.allclose(res["theta"], sim.theta, rtol=0, atol=1e-5)
    assert res["bytes_sent"] == [b[0] for b in sim.history.bytes_sent]
    assert res["loss"] == pytest.approx(sim.history.loss, rel=1e-5)


def test_a_dead_rank_is_named_and_the_others_save_and_stop(tmp_path):
    # about 15 s on 2 idle cores: two launches of 3 ranks, each rank a fresh interpreter
    cfg = RunConfig(task="digits", hidden=16, steps=8, batch=16, checkpoint=str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as e:
        launch(train, 3, args=(SCHEME, cfg), kwargs={"on_step": local_workers.die_at(2, 3)}, grace=20, timeout=120,
               collective_timeout=60)
    assert time.monotonic() - t0 < 60                            # nothing hung
    assert e.value.rank == 2 and "SIGKILL" in str(e.value)
    assert set(e.value.others) == {0, 1}
    assert all(how.startswith("PeerLost") and "after inner step 2" in how for how in e.value.others.values())
    states = {r: torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(3)}
    assert all(s["core"]["t"] == 2 for s in states.values())   # the last outer step every rank completed
    assert torch.equal(states[0]["core"]["theta"], states[1]["core"]["theta"])
    # start again; the dead rank's replacement has no file of its own and starts from a peer's
    os.remove(tmp_path / "rank2.pt")
    res = launch(train, 3, args=(SCHEME, RunConfig(task="digits", hidden=16, steps=8, batch=16,
                                                   checkpoint=str(tmp_path), resume=True)), timeout=120)
    assert res["steps"] == 8 and len(res["loss"]) == 6


RESUME = """
import sys, torch
torch.set_num_threads(int(sys.argv[3]))     # the parent's: the same kernels, the same bits
from milktea import Digits, Quantize
from milktea.local import AdamW, DiLoCo, LocalRun, Outage
scheme = DiLoCo(inner_steps=3, fragments=3, overlap=1, inner=AdamW(lr=3e-3), compressor=Quantize(bits=4, stochastic=True))
run = LocalRun(Digits(hidden=16), scheme, workers=3, batch=8, seed=1, outages=[Outage(0, 1, 2)], device="cpu")
run.load_state_dict(torch.load(sys.argv[1], weights_only=True))
run.train(6)
torch.save({"theta": run.theta, "rows": run.core.rows, "loss": run.history.loss}, sys.argv[2])
"""


def test_a_simulated_run_resumes_in_a_new_process_bit_for_bit(tmp_path):
    scheme = DiLoCo(inner_steps=3, fragments=3, overlap=1, inner=AdamW(lr=3e-3),
                    compressor=Quantize(bits=4, stochastic=True))
    kw = dict(workers=3, batch=8, seed=1, outages=[Outage(0, 1, 2)], device="cpu")
    whole = LocalRun(Digits(hidden=16), scheme, **kw)
    whole.train(12)
    first = LocalRun(Digits(hidden=16), scheme, **kw)
    first.train(6)
    torch.save(first.state_dict(), tmp_path / "state.pt")
    subprocess.run([sys.executable, "-c", RESUME, str(tmp_path / "state.pt"), str(tmp_path / "out.pt"),
                    str(torch.get_num_threads())], check=True, timeout=120)
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert torch.equal(out["theta"], whole.theta) and torch.equal(out["rows"], whole.core.rows)
    assert out["loss"] == whole.history.loss


def test_the_command_line_trains_on_local_workers():
    out = subprocess.run([sys.executable, "-m", "milktea.local", "--workers", "2", "--task", "digits", "--steps", "4",
                          "--inner-steps", "2", "--bits", "8", "--inner-lr", "0.01"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "diloco H=2 int8+ef: 2 workers, 4 inner steps (2 outer)" in out.stdout and "fewer than DDP" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "milktea.local", "--workers", "2", "--steps", "5", "--inner-steps", "2"],
                         capture_output=True, text=True, timeout=180)
    assert bad.returncode == 2 and "not a multiple of --inner-steps" in bad.stderr    # before any process starts
