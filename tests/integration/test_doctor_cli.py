"""`milktea doctor` from the command line: the CLI entry point and python -m milktea."""
import json
import os
import subprocess
import sys

import pytest

from milktea import __main__ as cli
from milktea.device import ENV_VAR


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_cli_doctor(capsys, no_env):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "gloo available" in out and "device chosen" in out


def test_python_dash_m_doctor_json(repo_root):
    env = dict(os.environ, PYTHONPATH=str(repo_root))
    env.pop(ENV_VAR, None)
    r = subprocess.run([sys.executable, "-m", "milktea", "doctor", "--json"], cwd=repo_root,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["gloo_available"] is True and d["cpu_cores"] >= 1
