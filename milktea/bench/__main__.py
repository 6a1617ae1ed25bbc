"""python -m milktea.bench <name> [options]: run one benchmark."""
from __future__ import annotations

import importlib
import sys

BENCHES = {
    "kernels": "milktea.bench.kernels",      # every compressor vs a plain copy
    "simulate": "milktea.bench.simulate",    # the N-worker simulator's speed
    "grade": "milktea.bench.grade",          # grading one submission
    "onebit": "milktea.bench.onebit",        # 1-bit Adam vs Adam vs Sign+EF SGD on digits
    "scaling": "milktea.bench.scaling",      # bytes and step time per protocol, 2-8 processes, modelled to 1,024
    "gpu": "milktea.bench.gpu",              # kernels, simulator, NCCL hook and notebooks on one CUDA GPU
    "gpt": "milktea.bench.gpt",              # every scheme on the character GPT, with per-layer statistics
    "memory": "milktea.bench.memory",        # extra peak memory of each scheme over plain DDP
    "local": "milktea.bench.local",          # DiLoCo vs DDP on the tiny GPT: bytes, loss, an outage
    "ft": "milktea.bench.ft",                # DiLoCo on torchft: a replica group killed and restarted
    "fsdp": "milktea.bench.fsdp",            # FSDP2 with int8/int4/Top-K reduce-scatters and int8 weights
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHES:
        print("usage: python -m milktea.bench {" + ",".join(BENCHES) + "} [options]")
        return 2
    return importlib.import_module(BENCHES[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
