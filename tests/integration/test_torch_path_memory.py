"""The torch paths (CUDA, MILKTEA_NUMBA=0) compress, feed back and decode with a step's
worth of temporaries, not the gradient's: whole-tensor ops had made up to 6x its size
(|x| cast to float64 for Sign's scale, the uniforms' hashes of the stochastic codecs)."""
import json
import os
import subprocess
import sys

import pytest

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")

PROBE = r"""
import json, sys, torch
import milktea
from milktea import ErrorFeedback, QSGD, Quantize, Sign, TernGrad, TopK, kernels
kernels.TORCH_PIECE = 1 << 16
torch.set_num_threads(1)
def status(key):
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024
def grew(f):   # peak resident growth while f runs, less what f returns (a packet's bytes)
    base = status("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")      # VmHWM := VmRSS
    kept = f()
    held = sum(p.numel() * p.element_size() for p in getattr(kept, "parts", ()) if torch.is_tensor(p))
    return status("VmHWM") - base - held
n = int(sys.argv[1])
g = torch.randn(n, generator=torch.Generator().manual_seed(0))
out = torch.empty(n)
makers = {"sign+ef": lambda: ErrorFeedback(Sign()), "topk+ef": lambda: ErrorFeedback(TopK(0.01)),
          "int8": lambda: Quantize(8), "int4-stochastic": lambda: Quantize(4, stochastic=True),
          "qsgd": lambda: QSGD(4), "terngrad": TernGrad}
res = {}
for name, make in makers.items():
    c = make()
    for _ in range(2):                                 # the ledger exists; the allocator has seen a step
        p = c.compress(g)
        c.decompress(p, out=out)
    res[name + " compress"] = grew(lambda: c.compress(g))
    res[name + " decompress"] = grew(lambda: c.decompress(p, out=out))
res["naive"] = grew(lambda: g.abs().sum(dtype=torch.float64))   # what the probe sees of a full temporary
print(json.dumps(res))
"""


@needs_proc
def test_torch_paths_hold_a_steps_temporaries_not_the_gradients(tmp_path):
    n = 1 << 23                                       # 32 MB of float32; steps of 65,536 entries
    env = dict(os.environ, MILKTEA_NUMBA="0", MALLOC_MMAP_THRESHOLD_="131072")   # freed blocks leave
    res = subprocess.run([sys.executable, "-c", PROBE, str(n)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    grew = json.loads(res.stdout.strip().splitlines()[-1])
    full = 4 * n
    assert grew.pop("naive") > 2.5 * full, grew      # |x| and its float64 copy: the probe sees them
    kept = n // 100                                   # Top-K's candidates and picks grow with k
    over = {k: round(v / full, 3) for k, v in grew.items() if v > (160 * kept if "topk" in k else full / 8)}
    assert not over, f"temporaries above a step's (x the gradient's size): {over}"
