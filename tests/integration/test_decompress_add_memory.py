"""decompress_add(packet, out, alpha) == out + alpha * decompress(packet), without a
full-size temporary for the sparse, quantized, sign and dense codecs."""
import json
import os
import subprocess
import sys

import pytest
import torch

from compressor_zoo import ZOO
from milktea import Chain, Quantize, RandomK, TopK
from milktea.compressors import Sparsifier



needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")

PROBE = r"""
import json, sys, torch
import milktea
import milktea.compressors, milktea.kernels   # loaded before the baseline: measure temporaries, not imports
from milktea import Packet
torch.set_num_threads(1)
def peak():   # this process's high-water RSS (ru_maxrss would carry over the parent's)
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
p = Packet.from_bytes(open(sys.argv[1], "rb").read())
comp = milktea.Identity()                    # decompress_add/decompress dispatch on the packet
out = torch.ones(p.shape)                    # touched: RSS is now at its high-water mark
base = peak()
comp.decompress_add(p, out, alpha=-1.0)
fused = peak()
out += comp.decompress(p).float()            # the naive way, to show the probe sees a full tensor
naive = peak()
print(json.dumps({"fused": fused - base, "naive": naive - fused}))
"""

N = 1 << 24     # 16M entries: 64 MB as float32

MEMORY_CASES = {"topk-1%": lambda: TopK(0.01), "randomk-1%": lambda: RandomK(0.01),
                "topk-1%+int8": lambda: Chain(TopK(0.01), Quantize(8)), "int8": ZOO["int8"], "int4": ZOO["int4"],
                "sign": ZOO["sign"], "qsgd": ZOO["qsgd"], "identity": ZOO["identity"], "fp16": ZOO["fp16"]}


@needs_proc
@pytest.mark.parametrize("name", sorted(MEMORY_CASES))
def test_no_full_size_temporary(name, tmp_path):
    x = torch.randn(N, generator=torch.Generator().manual_seed(0))
    comp = MEMORY_CASES[name]()
    packet = comp.compress(x)
    first = getattr(comp, "first", comp)                     # a chain's sparsifier
    kept = first.k_for(N) if isinstance(first, Sparsifier) else 0
    del x
    path = tmp_path / "packet.bin"
    path.write_bytes(packet.to_bytes())
    del packet
    env = dict(os.environ, MILKTEA_NUMBA="0")
    res = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    grew = json.loads(res.stdout.strip().splitlines()[-1])
    full = 4 * N
    assert grew["naive"] > 0.9 * full, grew             # the probe does see a full-size tensor
    if kept:   # sparse: the indices are decoded whole, so temporaries grow with k, not n
        assert grew["fused"] < min(96 * kept, full / 4), grew
    else:      # the rest work piece by piece: a few MB of scratch (index and float temporaries
        # of one 65,536-entry piece, and what the allocator keeps of them), never the tensor
        assert grew["fused"] < full / 4, grew
