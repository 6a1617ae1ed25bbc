"""milktea.local.ft with real processes under a real lighthouse: a replica group killed with
SIGKILL and restarted (the quorum shrinks, regrows, the loss keeps falling, every group ends
with the same model); with fp32 reports and no fault, the same model as milktea.local under
torchrun and as torchft's own DiLoCo; bad input refused with no process left; Ctrl-C,
SIGTERM and a killed launcher leave no process behind.

CPU: about 25 s for the kill (five processes: a lighthouse, three groups, one restart, and a
duplicate group refused), 25 s for the three equivalent runs, 20 s for the interruptions."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from milktea import TopK
from milktea.local import AdamW, DiLoCo, OuterSGD
from milktea.local.dist import RunConfig
from milktea.local.ft import FTConfig, Kill, start
from milktea.local.ft import run as ft_run
from milktea.local.ft.engine import available
from milktea.tasks import make_task

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300),
              pytest.mark.skipif(not available(), reason="torchft is not installed (pip install torchft==0.2.0)")]


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds MILKTEA_TEST_MARK=mark (this test's own)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if f"MILKTEA_TEST_MARK={mark}".encode() in env and state != b"Z" and int(pid) != os.getpid():
            out.append(int(pid))
    return out


def _events(folder, group, kind):
    p = Path(folder) / f"group{group}-0.jsonl"
    return p.exists() and f'"e": "{kind}"' in p.read_text()


def test_a_killed_group_leaves_the_quorum_rejoins_and_training_goes_on(tmp_path):
    # H = 5 with each inner step paced to 50 ms: 60 outer steps of about 0.25 s; the process that
    # restarts group 2 loads with the others (a standby), so that its rejoining does not hang on
    # how long torch takes to load on a busy machine (python -m milktea.bench ft restarts cold)
    scheme = DiLoCo(inner_steps=5, inner=AdamW(lr=3e-3), compressor=TopK(ratio=0.1))
    ft = FTConfig(pace_s=0.05, heartbeat_ms=500, join_ms=2000, timeout_s=10.0)
    t0 = time.monotonic()
    job = start(scheme, RunConfig(task="digits", hidden=16, steps=300, batch=16), groups=3, ft=ft,
                faults=[Kill(group=2, at_step=3, restart_after=1.0)], folder=str(tmp_path / "run"), standby=True)
    try:
        while not _events(job.folder, 1, "step"):
            assert not job.done(), job.wait()
            time.sleep(0.2)
        # a second group 1 against the same lighthouse is refused, before it trains
        dup = subprocess.run([sys.executable, "-m", "milktea.local", "--ft", "--groups", "3", "--group-id", "1",
                              "--lighthouse", job.lighthouse, "--task", "digits", "--inner-steps", "5", "--steps", "300",
                              "--out", str(tmp_path / "dup")], capture_output=True, text=True, timeout=120, cwd=ROOT)
        res = job.wait(timeout=240)
    finally:
        job.stop()
    assert time.monotonic() - t0 < 90
    assert dup.returncode == 2 and "replica group 1 is already running" in dup.stderr, dup.stderr[-800:]
    log, (k,) = res.quorum_log, res.kills
    assert all(set(r) >= {"step", "members", "recovering"} for r in log)
    before = [r for r in log if r["time"] < k["killed"]]
    assert before and all(r["members"] == [0, 1, 2] and r["committed"] for r in before)
    # the others went on without group 2 within the Manager's timeout ...
    assert k["shrink_s"] is not None and k["shrink_s"] < ft.timeout_s
    shrunk = [r for r in log if r["members"] == [0, 1] and r["committed"]]
    assert shrunk and shrunk[0]["step"] <= k["at_step"] + 1
    # ... and group 2's new process rejoined: it received a peer's state, then reported again
    (back,) = [r for r in log if r["recovering"]]
    assert back["recovering"] == [2] and back["members"] == [0, 1, 2] and back["heard"] == [0, 1] and back["committed"]
    params = 64 * 16 + 16 + 16 * 10 + 10
    assert back["received_bytes"] >= 5 * params * 4        # theta, rows, 2 AdamW moments, outer momentum
    assert k["rejoined_step"] == back["step"] and k["recovery_s"] > 0
    after = [r for r in log if r["step"] > back["step"]]
    assert after and all(r["heard"] == [0, 1, 2] and r["committed"] for r in after)
    assert [r["step"] for r in log if r["committed"]] == list(range(60))
    assert k["restarted"] - k["killed"] >= 1.0 and k["rejoined"] > k["restarted"]
    # every group, the restarted one too, ends with the same parameters: recovery gave it the
    # weights and the outer momentum, and it stepped with the others from there
    assert res.agree == 0.0 and all(g["final"] == res.final for g in res.groups)
    g2 = res.groups[2]
    assert g2["incarnations"] == 2 and 0 < g2["outer steps"] < 60 and g2["bytes received"] == back["received_bytes"]
    # the loss kept falling through the fault
    loss = {t: x for _, t, x in res.loss[0]}
    early = sum(loss[t] for t in range(1, 16)) / 15
    late = sum(loss[t] for t in range(286, 301)) / 15
    assert late < 0.5 * early and res.final["loss"] < 1.0
    assert res.left_behind == [] and job.left_behind() == []


def test_without_faults_fp32_it_trains_what_milktea_local_and_torchfts_diloco_train(tmp_path):
    scheme = DiLoCo(inner_steps=4, inner=AdamW(lr=3e-3), outer=OuterSGD(lr=0.7, momentum=0.9))
    cfg = RunConfig(task="digits", steps=12, batch=16, seed=2)
    ours = ft_run(scheme, cfg, groups=2, folder=str(tmp_path / "milktea"))
    theirs = ft_run(scheme, cfg, groups=2, folder=str(tmp_path / "torchft"), engine="torchft")
    from milktea.distributed.ports import free_port
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        str(free_port()), "-m", "milktea.local", "--task", "digits", "--inner-steps", "4", "--steps",
                        "12", "--batch", "16", "--seed", "2", "--inner-lr", "3e-3", "--save", str(tmp_path / "t.pt")],
                       capture_output=True, text=True, timeout=180, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    torchrun = torch.load(tmp_path / "t.pt", weights_only=False)
    a, b, c = ours.theta(), theirs.theta(), torchrun["theta"]
    init = torch.cat([p.detach().reshape(-1) for p in make_task("digits", seed=2).model().parameters()])
    assert float((a - init).abs().max()) > 1e-3                               # it trained
    assert torch.allclose(a, b, rtol=0, atol=1e-6) and torch.allclose(a, c, rtol=0, atol=1e-6)
    assert ours.agree == 0.0 and theirs.agree == 0.0
    assert ours.final["loss"] == pytest.approx(torchrun["final"]["loss"], rel=1e-5)
    assert ours.final["loss"] == pytest.approx(theirs.final["loss"], rel=1e-5)
    assert [r["members"] for r in ours.quorum_log] == [[0, 1]] * 3
    assert ours.groups[0]["bytes sent"] == 3 * a.numel() * 4                # fp32: 4 bytes a parameter


def _launcher(tmp_path, mark, name):
    cmd = [sys.executable, "-m", "milktea.local", "--ft", "--groups", "1", "--task", "digits", "--inner-steps", "5",
           "--steps", "5000", "--pace", "0.05", "--out", str(tmp_path / name)]
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, MILKTEA_TEST_MARK=mark), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_an_interrupted_run_leaves_no_process(tmp_path, how):
    mark = f"{how}-{os.getpid()}-{time.time_ns()}"
    p = _launcher(tmp_path, mark, how)
    try:
        deadline = time.monotonic() + 120
        while not _events(tmp_path / how, 0, "step"):        # the lighthouse and the group are up
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        assert len(_marked(mark)) >= 3                        # launcher, lighthouse, group
        p.send_signal(getattr(signal, how))
        out, err = p.communicate(timeout=60)
        if how != "SIGKILL":
            assert p.returncode == {"SIGINT": 130, "SIGTERM": 143}[how], err[-1500:]
            assert "every process of the run has ended" in err
        deadline = time.monotonic() + 10                      # SIGKILL: the kernel's parent-death signal
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(mark) == []
    finally:
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)


def test_bad_input_on_the_command_line_starts_nothing(tmp_path):
    mark = f"bad-{os.getpid()}-{time.time_ns()}"
    env = dict(os.environ, MILKTEA_TEST_MARK=mark)
    base = [sys.executable, "-m", "milktea.local", "--ft", "--task", "digits", "--inner-steps", "2", "--steps", "4",
            "--out", str(tmp_path / "x")]
    for extra, said in [(["--compressor", "powersgd"], "cannot carry a pseudo-gradient"),
                        (["--lighthouse", "127.0.0.1:9"], "no torchft lighthouse answers at http://127.0.0.1:9"),
                        (["--kill", "3:1:0"], "there is no replica group 3")]:
        r = subprocess.run(base + extra, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and said in r.stderr, (extra, r.stderr[-800:])
        assert not (tmp_path / "x" / "spec.pkl").exists()
    assert _marked(mark) == []
