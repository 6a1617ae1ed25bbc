"""The multi-node recipe: two emulated hosts (network namespaces, a tc-shaped link), one
torchrun on each, joined by a c10d rendezvous on host 0 (root on Linux only)."""
import io
import os
import subprocess
import time

import pytest

from milktea.distributed.netns import multinode, torchrun_host_args, unavailable_reason

REASON = unavailable_reason()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.distributed, pytest.mark.netns, pytest.mark.timeout(600)]
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"shaped namespaces unavailable: {REASON}")


def _namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_each_host_gets_the_settings_a_real_cluster_needs():
    head = torchrun_host_args(0, 2, "10.0.0.1", "10.0.0.1", 29400, "job")
    other = torchrun_host_args(1, 2, "10.0.0.2", "10.0.0.1", 29400, "job")
    assert "is_host=1" in head[head.index("--rdzv-conf") + 1]
    assert "is_host=0" in other[other.index("--rdzv-conf") + 1]
    assert other[other.index("--local-addr") + 1] == "10.0.0.2"
    assert other[other.index("--rdzv-endpoint") + 1] == "10.0.0.1:29400"
    assert other[other.index("--max-restarts") + 1] == "0"


@needs_netns
def test_two_hosts_train_together_over_a_shaped_link(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)
    before = _namespaces()
    out = io.StringIO()
    code = multinode(["--nproc-per-node", "1", "-m", "milktea.train", "--scheme", "topk", "--steps", "4",
                      "--hidden", "32", "--timeout", "120"], nodes=2, gbit=0.2, timeout=400, out=out)
    text = out.getvalue()
    assert code == 0, text[-3000:]
    assert "Top-1%+EF: 2 workers" in text and "exit codes per host [0, 0]" in text
    assert _namespaces() == before


@needs_netns
def test_a_run_that_does_not_end_is_stopped(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)
    out = io.StringIO()
    t0 = time.monotonic()
    code = multinode(["--nproc-per-node", "1", "-m", "milktea.train", "--steps", "100000", "--hidden", "32"],
                     nodes=2, gbit=0.2, timeout=30, out=out)
    assert code == 1 and "still running after 30 s; stopping hosts [0, 1]" in out.getvalue()
    assert time.monotonic() - t0 < 120
    leftovers = subprocess.run(["pgrep", "-f", "milktea.train --steps 100000"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", "no process may outlive the run"
