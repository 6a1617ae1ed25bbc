"""Tests of exercise 01 (the bottleneck): bytes and time of a ring all-reduce, the waiting share of a
step, and the largest cluster that stays under a waiting share.

The format of a tests file: milktea/grade/assignment.py and docs/grading.md.
"""
import functools

from milktea.i18n import N_
from milktea.grade.spec import Case, Task, number, several

def _bytes_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("a single worker sends nothing"), (1000, 4, 1)),
             Case(N_("two workers"), (1000, 4, 2)),
             Case(N_("a 175B-parameter model in fp32 on 64 workers"), (175_000_000_000, 4, 64)),
             Case(N_("fp16 gradients on 8 workers"), (25_000_000, 2, 8))]
    rand = [Case(N_("random model and class size"), (int(rng.integers(1_000, 10**9)), int(rng.choice([1, 2, 4, 8])),
                                                  int(rng.integers(2, 1025)))) for _draw in range(4)]
    return fixed + rand


def _time_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("a single worker needs no communication"), (4e6, 1, 10.0, 5e-5)),
             Case(N_("700 GB over 100 Gbit/s, 64 workers, no latency"), (7e11, 64, 100.0, 0.0)),
             Case(N_("a small message where latency dominates"), (1e3, 16, 10.0, 1e-3))]
    rand = [Case(N_("random link"), (float(rng.uniform(1e3, 1e10)), int(rng.integers(2, 512)),
                                 float(rng.uniform(0.1, 400)), float(rng.uniform(0, 1e-3)))) for _draw in range(4)]
    return fixed + rand


def _iteration_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("nothing to do at all"), (0.0, 1000, 4, 1, 10.0, 0.0)),
             Case(N_("a single worker only computes"), (0.5, 10**6, 4, 1, 10.0, 5e-5)),
             Case(N_("a big model on a thin line"), (0.2, 10**9, 4, 64, 25.0, 5e-5))]
    rand = [Case(N_("random step"), (float(rng.uniform(0.01, 2)), int(rng.integers(10**4, 10**9)),
                                 int(rng.choice([2, 4])), int(rng.integers(2, 256)),
                                 float(rng.uniform(1, 400)), float(rng.uniform(0, 1e-4)))) for _draw in range(4)]
    return fixed + rand



def _robust(ref, args):
    """True when a share a hair lower or higher gives the same answer: the boundary is not so
    close to a whole number of workers that float rounding could decide it."""
    f, share = ref["largest_cluster"], args[-1]
    return f(*args[:-1], share * (1 - 1e-9)) == f(*args) == f(*args[:-1], share * (1 + 1e-9))


def _cluster_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("0.2 s of work and 4 GB of gradient on 100 Gbit/s: up to 80% waiting"), (0.2, 4e9, 100.0, 5e-5, 0.8)),
        Case(N_("no latency and a fast link: the waiting share never gets there"), (1.0, 1e8, 100.0, 0.0, 0.5)),
        Case(N_("no latency, but the bandwidth term alone passes the share"), (1.0, 1e9, 10.0, 0.0, 0.55)),
        Case(N_("a tiny message: latency alone decides"), (0.01, 1e3, 100.0, 1e-4, 0.2)),
        Case(N_("no waiting allowed at all: one worker"), (0.1, 1e6, 10.0, 1e-5, 0.0))]
    rand = []
    while len(rand) < 4:
        compute, nbytes = float(rng.uniform(0.01, 2)), float(10 ** rng.uniform(3, 10))
        gbit, latency = float(rng.uniform(1, 400)), float(10 ** rng.uniform(-7, -3))
        workers = int(rng.integers(2, 100_000 if hidden else 5_000)) + float(rng.uniform(0.2, 0.8))
        # the waiting share of a fractional cluster between two whole ones, from the master's 01.3
        share = ref["iteration_time"](compute, nbytes, 1, workers, gbit, latency)[1]
        args = (compute, nbytes, gbit, latency, share)
        if _robust(ref, args):
            rand.append(Case(N_("random step and link"), args))
    return fixed + rand

TASKS = [
    Task("01.1", "ring_allreduce_bytes", 2, _bytes_cases, number(rtol=1e-9)),
    Task("01.2", "ring_allreduce_time", 2, _time_cases, number(rtol=1e-9, atol=1e-15)),
    Task("01.3", "iteration_time", 2, _iteration_cases,
         several(number(rtol=1e-9, atol=1e-15), number(rtol=1e-9, atol=1e-12),
                 names=(N_("seconds"), N_("waiting fraction")))),
    Task("01.4", "largest_cluster", 3, _cluster_cases, number(rtol=0, atol=0)),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "01.1": functools.partial(_bytes_cases, hidden=True),
    "01.2": functools.partial(_time_cases, hidden=True),
    "01.3": functools.partial(_iteration_cases, hidden=True),
    "01.4": functools.partial(_cluster_cases, hidden=True),
}
### END HIDDEN TESTS
