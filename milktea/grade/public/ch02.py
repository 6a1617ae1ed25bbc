"""Public tests of exercise 02 (compress the report): ratio from real bytes, error, speed-up."""
import numpy as np

from ...i18n import N_
from ..spec import Case, Task, number, several

DTYPES = (np.float16, np.float32, np.float64, np.int32, np.uint8, np.int8)


def _part(rng):
    n = int(rng.integers(1, 500))
    if rng.random() < 0.25:
        return bytes(rng.integers(0, 256, n, dtype=np.uint8))
    return rng.standard_normal(n).astype(rng.choice(DTYPES))


def _ratio_cases(rng, ref):
    g = rng.standard_normal(1000).astype(np.float32)
    fixed = [Case("Top-10%: int32 indices + float32 values", (g, [np.arange(100, dtype=np.int32), g[:100]])),
             Case("fp16 copy of an fp32 gradient", (g, [g.astype(np.float16)])),
             Case("a 2-D float64 gradient sent as 40 raw bytes", (np.zeros((10, 10)), [bytes(40)])),
             Case("uint8 indices, float16 values and a header", (g, [np.zeros(50, np.uint8), np.zeros(50, np.float16),
                                                                  b"hdr!"]))]
    rand = [Case("random gradient and packet", (rng.standard_normal(rng.integers(1, 20, size=2)).astype(
        rng.choice([np.float16, np.float32, np.float64])), [_part(rng) for _ in range(int(rng.integers(1, 4)))]))
        for _ in range(4)]
    return fixed + rand


def _error_cases(rng, ref):
    g = rng.standard_normal(64).astype(np.float32)
    fixed = [Case("a perfect copy", (g, g.copy())),
             Case("nothing sent at all", (g, np.zeros_like(g))),
             Case("the sign flipped", (g, -g)),
             Case("an fp16 round trip, 2-D", (g.reshape(8, 8), g.reshape(8, 8).astype(np.float16)))]
    rand = []
    for _ in range(4):
        x = rng.standard_normal(int(rng.integers(2, 2000)))
        rand.append(Case("random gradient and approximation", (x, x + rng.standard_normal(x.size) * rng.uniform(0, 1))))
    return fixed + rand


def _speedup_cases(rng, ref):
    fixed = [Case("0.2 s of work, 3 s on the phone, R = 8", (0.2, 3.0, 8.0, 0.0)),
             Case("R = 1 and free coding: no change", (1.0, 1.0, 1.0, 0.0)),
             Case("coding costs more than it saves", (0.5, 0.2, 4.0, 0.3))]
    rand = [Case("random step", (float(rng.uniform(0, 2)), float(rng.uniform(0.01, 5)), float(rng.uniform(1, 1000)),
                                 float(rng.uniform(0, 0.5)))) for _ in range(4)]
    return fixed + rand


def _break_even_cases(rng, ref):
    fixed = [Case("free coding: any R >= 1 helps", (0.2, 3.0, 0.0)),
             Case("coding slower than the call itself", (0.2, 1.0, 1.5)),
             Case("coding exactly as slow as the call", (0.2, 1.0, 1.0)),
             Case("0.5 s of coding against 3 s on the phone", (0.2, 3.0, 0.5))]
    rand = [Case("random step", (float(rng.uniform(0, 2)), float(rng.uniform(0.5, 5)), float(rng.uniform(0, 0.5))))
            for _ in range(4)]
    return fixed + rand


def _gather_cases(rng, ref):
    fixed = [Case("the chapter's 1.6 GB, R = 8, 64 workers on 25 Gbit/s", (1.6e9, 8.0, 64, 50e-6, 25e9 / 8)),
             Case("no latency: break-even at N / 2", (1e8, 4.0, 16, 0.0, 1.25e9)),
             Case("two workers", (4e6, 2.0, 2, 1e-5, 1e9)),
             Case("latency dominates: a tiny gradient", (1e3, 100.0, 32, 1e-4, 1.25e10))]
    rand = [Case("random cluster", (float(rng.uniform(1e3, 1e10)), float(rng.uniform(1, 1000)), int(rng.integers(2, 512)),
                                    float(rng.uniform(0, 1e-3)), float(rng.uniform(1e8, 5e10)))) for _ in range(4)]
    return fixed + rand


TASKS = [
    Task("02.1", "compression_ratio", 2, N_("compression ratio from the real bytes on the wire"),
         _ratio_cases, number(rtol=1e-9), ("grad", "parts")),
    Task("02.2", "relative_error", 2, N_("how much a lossy copy got wrong"),
         _error_cases, number(rtol=1e-6, atol=1e-9), ("grad", "approx")),
    Task("02.3", "speedup", 2, N_("the speed-up of one step from compressing"),
         _speedup_cases, number(rtol=1e-9), ("compute_s", "comm_s", "ratio", "codec_s")),
    Task("02.4", "break_even_ratio", 2, N_("the smallest ratio that pays for its coding time"),
         _break_even_cases, number(rtol=1e-9), ("compute_s", "comm_s", "codec_s")),
    Task("02.5", "allgather_vs_ring", 3, N_("all-gathered packets against a ring all-reduce, and the break-even R"),
         _gather_cases, several(number(rtol=1e-9, atol=1e-15), number(rtol=1e-9, atol=1e-15), number(rtol=1e-9),
                                names=("t_ring", "t_gather", "break_even")),
         ("nbytes", "ratio", "workers", "alpha", "bandwidth")),
]
