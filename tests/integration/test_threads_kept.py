"""The first compiled kernel leaves torch's thread count as the user set it. numba's OpenMP
layer shares one runtime with torch, and starting its pool used to set that runtime's count
to numba's: a notebook that chose one thread found two after its first large compression.
A fresh process, since numba starts its pool once per process."""
import subprocess
import sys

CODE = """
import torch
torch.set_num_threads(1)
from milktea import Sign, TopK
x = torch.randn(2_000_000)
Sign().compress(x)
TopK(0.01).compress(x)
print(torch.get_num_threads())
"""


def test_a_kernel_does_not_change_torchs_threads():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120,
                         env={"MILKTEA_NUMBA": "1", "PATH": "/usr/bin:/bin", "NUMBA_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1", out.stdout + out.stderr
