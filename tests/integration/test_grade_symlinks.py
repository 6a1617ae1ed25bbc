"""A venv reached through a symbolic link (a home folder that is a link, a venv moved and linked
back) still gives a working sandbox: bubblewrap mounts the real folder, and the child's Python
is started through it. Before, the sandbox looked for Python at the linked path, could not
start it, and the grader blamed user namespaces."""
import os
import subprocess
import sys

import pytest

from _grade_helpers import ROOT
from milktea.grade import isolation

pytestmark = pytest.mark.skipif(not isolation.probe().isolated, reason="needs a sandbox (bubblewrap)")

SCRIPT = """
import sys
from milktea.grade import isolation
from milktea.grade.child import encode
from milktea.grade.sandbox import Cell, TaskJob, run
box = isolation.probe()
print("isolated", box.isolated, box.why)
res = run([Cell("c0", "cell", "def f(x):\\n    return x + 1\\n")], [TaskJob("1", "f", [{"args": encode([1]), "kwargs": None}])],
          sandbox=box)
print("value", res.outcomes["1"][0].value, res.outcomes["1"][0].message)
"""


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a venv to link to")
def test_a_venv_reached_through_a_link_gives_a_working_sandbox(tmp_path):
    link = tmp_path / "home" / "venv"
    link.parent.mkdir()
    link.symlink_to(os.path.realpath(sys.prefix))
    python = link / "bin" / os.path.basename(sys.executable)
    done = subprocess.run([str(python), "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "isolated True" in done.stdout and "value 2" in done.stdout, done.stdout
