"""Public tests of exercise 01 (the bottleneck): bytes and time of a ring all-reduce."""
from ...i18n import N_
from ..spec import Case, Task, number, several

PARAMS = {
    "ring_allreduce_bytes": ("n_params", "bytes_per_param", "workers"),
    "ring_allreduce_time": ("nbytes", "workers", "gbit_per_s", "latency_s"),
    "iteration_time": ("compute_s", "n_params", "bytes_per_param", "workers", "gbit_per_s", "latency_s"),
}


def _bytes_cases(rng, ref):
    fixed = [Case("a single worker sends nothing", (1000, 4, 1)),
             Case("two workers", (1000, 4, 2)),
             Case("a 175B-parameter model in fp32 on 64 workers", (175_000_000_000, 4, 64)),
             Case("fp16 gradients on 8 workers", (25_000_000, 2, 8))]
    rand = [Case("random model and class size", (int(rng.integers(1_000, 10**9)), int(rng.choice([1, 2, 4, 8])),
                                                  int(rng.integers(2, 1025)))) for _ in range(4)]
    return fixed + rand


def _time_cases(rng, ref):
    fixed = [Case("a single worker needs no communication", (4e6, 1, 10.0, 5e-5)),
             Case("700 GB over 100 Gbit/s, 64 workers, no latency", (7e11, 64, 100.0, 0.0)),
             Case("a small message where latency dominates", (1e3, 16, 10.0, 1e-3))]
    rand = [Case("random link", (float(rng.uniform(1e3, 1e10)), int(rng.integers(2, 512)),
                                 float(rng.uniform(0.1, 400)), float(rng.uniform(0, 1e-3)))) for _ in range(4)]
    return fixed + rand


def _iteration_cases(rng, ref):
    fixed = [Case("nothing to do at all", (0.0, 1000, 4, 1, 10.0, 0.0)),
             Case("a single worker only computes", (0.5, 10**6, 4, 1, 10.0, 5e-5)),
             Case("a big model on a thin line", (0.2, 10**9, 4, 64, 25.0, 5e-5))]
    rand = [Case("random step", (float(rng.uniform(0.01, 2)), int(rng.integers(10**4, 10**9)),
                                 int(rng.choice([2, 4])), int(rng.integers(2, 256)),
                                 float(rng.uniform(1, 400)), float(rng.uniform(0, 1e-4)))) for _ in range(4)]
    return fixed + rand


TASKS = [
    Task("01.1", "ring_allreduce_bytes", 2, N_("bytes each worker sends in a ring all-reduce"),
         _bytes_cases, number(rtol=1e-9), PARAMS["ring_allreduce_bytes"]),
    Task("01.2", "ring_allreduce_time", 2, N_("time of a ring all-reduce (alpha-beta model)"),
         _time_cases, number(rtol=1e-9, atol=1e-15), PARAMS["ring_allreduce_time"]),
    Task("01.3", "iteration_time", 2, N_("one training step and the share spent waiting"),
         _iteration_cases, several(number(rtol=1e-9, atol=1e-15), number(rtol=1e-9, atol=1e-12),
                                   names=("seconds", "waiting fraction")), PARAMS["iteration_time"]),
]
