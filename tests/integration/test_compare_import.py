"""`python -m milktea compare --import MODULE` runs a compressor written in a file of one's
own: the command imports it, and so do the two worker processes that train with it."""
import json
import subprocess
import sys

import pytest

USER_MODULE = '''
import torch
from milktea import Cast
from milktea.distributed import schemes


class Half(Cast):
    """float16 on the wire; a worker that did not import this file could not unpickle it"""

    def __init__(self):
        super().__init__(torch.float16)


schemes.register("my-half", Half())
'''


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_a_users_compressor_runs_from_the_command_line(tmp_path):
    (tmp_path / "my_half.py").write_text(USER_MODULE)
    cmd = [sys.executable, "-m", "milktea", "compare", "--import", "my_half.py", "--schemes", "dense,my-half",
           "--steps", "2", "--hidden", "16", "--loopback", "--no-plots", "--no-progress", "--sequential",
           "--workers", "2", "--out", "out"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["scheme"]: r for r in json.loads((tmp_path / "out" / "summary.json").read_text())["rows"]}
    assert "error" not in rows["my-half"] and rows["my-half"]["ratio"] > 1.5
    assert "my-half" in done.stdout
