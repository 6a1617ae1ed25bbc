"""One device rule: MILKTEA_DEVICE decides wherever a device is chosen (a single process, a
rank of a distributed run, the launcher's backend: launch's pick_backend is backend_for_ranks),
and only milktea.device decides."""
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import milktea
from milktea.device import ENV_VAR, backend_for, pick_device, rank_device
from milktea.device import backend_for_ranks as pick_backend

ROOT = Path(milktea.__file__).parent


@pytest.fixture
def gpus(monkeypatch):
    """Pretend this machine has `n` GPUs and NCCL."""
    def have(n):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.delenv(ENV_VAR, raising=False)
    return have


def test_a_rank_takes_its_own_gpu_unless_milktea_device_says_otherwise(gpus, monkeypatch):
    gpus(2)
    assert rank_device(local_rank=1, local_world=2) == torch.device("cuda", 1)
    assert pick_backend(2) == "nccl"
    assert rank_device(local_rank=0, local_world=3) == torch.device("cpu")     # not a GPU per rank
    assert pick_backend(3) == "gloo"
    monkeypatch.setenv(ENV_VAR, "cpu")                  # honoured by the rank and the launcher alike
    assert rank_device(local_rank=1, local_world=2) == torch.device("cpu")
    assert pick_backend(2) == "gloo"
    monkeypatch.delenv(ENV_VAR)
    assert pick_backend(2, prefer="cpu") == "gloo"        # what launch(env={MILKTEA_DEVICE: ...}) gives its ranks
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="no GPU of its own.*MILKTEA_DEVICE=cpu"):
        pick_backend(3)
    monkeypatch.setenv(ENV_VAR, "cuda:1")
    with pytest.raises(ValueError, match="one GPU; use 'cuda'"):
        rank_device(local_rank=0, local_world=2)


def test_a_running_group_fixes_the_kind_and_a_contradiction_says_what_to_change(gpus, monkeypatch):
    gpus(2)
    assert rank_device("gloo", local_rank=1, local_world=2) == torch.device("cpu")
    assert rank_device("nccl", local_rank=1, local_world=2) == torch.device("cuda", 1)
    monkeypatch.setenv(ENV_VAR, "cpu")
    with pytest.raises(ValueError, match="runs nccl.*set MILKTEA_DEVICE to cuda"):
        rank_device("nccl", local_rank=0, local_world=2)
    with pytest.raises(ValueError, match="runs nccl"):
        pick_backend(2, "nccl")
    gpus(0)
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        rank_device("gloo", local_rank=0, local_world=1)
    assert backend_for(torch.device("cuda", 0)) == "nccl" and backend_for("cpu") == "gloo"


def test_without_nccl_auto_falls_back_to_the_cpu(gpus, monkeypatch):
    gpus(2)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    assert pick_backend(2) == "gloo"
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="no NCCL"):
        pick_backend(2)


def test_simulate_takes_its_device_through_the_rule():
    task = milktea.Quadratic()
    with pytest.raises(ValueError, match="argument device is 'bogus'; use one of"):
        milktea.simulate.simulate(task, None, workers=2, steps=1, device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available.*Use 'cpu'"):
            milktea.simulate.simulate(task, None, workers=2, steps=1, device="cuda")
    with pytest.raises(TypeError, match="device must be a str"):
        milktea.simulate.simulate(task, None, workers=2, steps=1, device=0)
    assert pick_device(torch.device("cpu")) == torch.device("cpu")


def test_only_milktea_device_chooses_a_device():
    """No other module turns a rank, LOCAL_RANK or the backend into a device itself."""
    pattern = re.compile(r'torch\.device\(\s*"cuda"\s*,|LOCAL_RANK"\]|cuda\.is_available\(\) and "LOCAL_RANK"'
                         r'|pick_device\(\) if device is None')
    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if p.name != "device.py"
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line) and ">>>" not in line]
    assert offenders == [], offenders
