"""The GPU benchmark's no-GPU path: a clear SKIP and exit status 0."""
import os
import subprocess
import sys

import torch

from milktea.bench import gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_without_cuda_it_skips_cleanly(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SKIP: ") and "needs a CUDA GPU" in out


def test_the_command_line_says_skip_here_or_runs_every_check():
    env = dict(os.environ, PYTHONPATH=ROOT)
    if torch.cuda.is_available():      # a GPU machine runs the real thing elsewhere
        return
    r = subprocess.run([sys.executable, "-m", "milktea.bench", "gpu"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=400)   # a loaded machine can take minutes to import torch
    assert r.returncode == 0 and r.stdout.startswith("SKIP: "), (r.returncode, r.stdout, r.stderr[-1000:])
