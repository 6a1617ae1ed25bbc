"""Tests of exercise 09 (sharding): the least ZeRO stage that fits a rank's memory, the bytes of a
sharded step, a qgZ reduce-scatter to fix, the largest model a ledger leaves room for, and what
crosses the slow link in HSDP."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, number, show


def _steady(fn, args, at, rel=1e-9):
    """True if the answer does not move when argument `at` moves by a hair either way: float
    rounding cannot decide the case."""
    def moved(e):
        a = list(args)
        a[at] = a[at] * e
        return fn(*a)
    return moved(1 - rel) == fn(*args) == moved(1 + rel)


def _stage_compare(expected, got, args):
    if got is None or expected is None:
        if got is expected:
            return None
        if expected is None:
            return _("expected None (not even ZeRO-3 fits), got {v}").format(v=show(got))
        return _("expected stage {want}, got None").format(want=expected)
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return _("expected a stage (an int from 0 to 3) or None, got {v}").format(v=show(got))
    if int(got) != int(expected):
        return _("expected stage {want}, got {got}").format(want=expected, got=int(got))
    return None


GB = 1e9


def _stage_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("7.5B parameters, 64 ranks, mixed-precision Adam, 40 GB"), (7.5e9, 64, 40 * GB, 2, 2, 12)),
        Case(N_("the same with 20 GB"), (7.5e9, 64, 20 * GB, 2, 2, 12)),
        Case(N_("the same with 10 GB"), (7.5e9, 64, 10 * GB, 2, 2, 12)),
        Case(N_("the same with 1 GB: nothing fits"), (7.5e9, 64, 1 * GB, 2, 2, 12)),
        Case(N_("a small model: plain data parallelism fits"), (1e8, 8, 80 * GB, 4, 4, 8)),
        Case(N_("an exact fit counts as a fit"), (1000, 4, 1000 * 4 + 1000 * 4 + 1000 * 8 // 4, 4, 4, 8)),
        Case(N_("SGD without momentum: no optimizer state"), (1e9, 8, 5 * GB, 4, 4, 0)),
        Case(N_("one rank: sharding saves nothing"), (1e9, 1, 15 * GB, 4, 4, 8))]
    rand = []
    while len(rand) < 6:
        args = [float(10 ** rng.uniform(5, 11)), int(rng.choice([1, 2, 4, 8, 16, 64, 256, 1024])), 0.0,
                int(rng.choice([2, 4])), int(rng.choice([2, 4])), int(rng.choice([0, 4, 8, 12, 16]))]
        whole = args[0] * sum(args[3:])                               # everything on every rank
        args[2] = float(whole * 10 ** rng.uniform(np.log10(1 / args[1]) - 0.3, 0.2))
        if _steady(ref["smallest_stage"], args, 2):
            rand.append(Case(N_("random model, ranks and memory"), tuple(args)))
    return fixed + rand


def _step_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("DDP: one all-reduce, fp32"), (25e6, 4, 0, 4, 4, 25e6)),
        Case(N_("ZeRO-1: reduce-scatter, then the updated weights gathered"), (25e6, 4, 1, 4, 4, 25e6)),
        Case(N_("ZeRO-2 sends what ZeRO-1 sends"), (25e6, 4, 2, 4, 4, 25e6)),
        Case(N_("FSDP, every layer re-gathered in backward"), (25e6, 4, 3, 4, 4, 25e6)),
        Case(N_("FSDP keeps a fifth of the weights from forward to backward"), (25e6, 4, 3, 4, 4, 20e6)),
        Case(N_("FSDP with a bf16 reduce and fp32 weights"), (1e9, 8, 3, 2, 4, 1e9)),
        Case(N_("ZeRO-2, bf16 weights, fp32 gradients"), (1e9, 8, 2, 4, 2, 1e9)),
        Case(N_("one rank sends nothing"), (1e6, 1, 3, 4, 4, 1e6))]
    rand = []
    for _draw in range(6):
        params = float(10 ** rng.uniform(3, 11))
        rand.append(Case(N_("random model, ranks, stage and dtypes"),
                         (params, int(rng.integers(1, 513)), int(rng.integers(0, 4)), float(rng.choice([1.016, 2, 4])),
                          float(rng.choice([1.016, 2, 4])), float(params * rng.uniform(0, 1)))))
    return fixed + rand


def _qgz_cases(rng, ref, hidden=False):
    r = np.random.default_rng
    spike = np.array([[0.31, -0.72, 9.7, 0.05, 0.18, -0.43], [-0.27, 0.66, 0.09, -0.38, 0.21, 0.57]])
    fixed = [] if hidden else [
        Case(N_("two ranks, blocks that fit the chunks"), (r(1).standard_normal((2, 8)) * 0.3, 8, 4)),
        Case(N_("an outlier beside another rank's chunk: blocks must not straddle"), (spike, 8, 2)),
        Case(N_("every sender has its own scales: decode, then add"), (np.array([[0.11, -0.23, 0.37, 0.61],
                                                                                  [4.3, 2.9, -1.7, 3.3]]), 8, 2)),
        Case(N_("int4, a last block shorter than the others"), (r(2).standard_normal((3, 15)), 4, 4)),
        Case(N_("a block of zeros"), (np.array([[0.0, 0.0, 0.29, -0.83], [0.0, 0.0, -0.47, 0.13]]), 8, 2)),
        Case(N_("one rank: nothing to scatter, still quantized"), (r(3).standard_normal((1, 7)), 4, 3)),
        Case(N_("blocks larger than a chunk"), (r(4).standard_normal((4, 12)), 8, 64))]
    rand = []
    for _draw in range(5):
        ranks, size = int(rng.integers(1, 9 if hidden else 5)), int(rng.integers(1, 200 if hidden else 13))
        grads = rng.standard_normal((ranks, ranks * size)) * float(10 ** rng.uniform(-4, 1))
        grads[rng.random(grads.shape) < 0.05] *= 30.0                     # a few outliers
        rand.append(Case(N_("random gradients, ranks and blocks"),
                         (grads, int(rng.choice([2, 3, 4, 8])), int(rng.integers(1, 2 * size + 2)))))
    return fixed + rand


def _model_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("80 GB, 8 ranks, mixed-precision Adam, no ledger"), (80 * GB, 8, 2, 2, 12, None)),
        Case(N_("the same with a ledger before the reduce-scatter"), (80 * GB, 8, 2, 2, 12, "worker")),
        Case(N_("the same with a ledger on the reduced shard"), (80 * GB, 8, 2, 2, 12, "shard")),
        Case(N_("64 ranks: the ledger before the reduce-scatter"), (80 * GB, 64, 2, 2, 12, "worker")),
        Case(N_("64 ranks, the ledger on the shard"), (80 * GB, 64, 2, 2, 12, "shard")),
        Case(N_("one rank: its own chunk never travels"), (24 * GB, 1, 4, 4, 8, "worker")),
        Case(N_("bf16 gradients: the ledger stays float32"), (16 * GB, 4, 2, 2, 4, "worker")),
        Case(N_("a budget that is not a whole number of models"), (1001, 2, 4, 4, 8, "shard"))]
    rand = []
    while len(rand) < 6:
        args = (float(10 ** rng.uniform(3, 12)), int(rng.choice([1, 2, 3, 4, 8, 16, 64, 512])), int(rng.choice([2, 4])),
                int(rng.choice([2, 4])), int(rng.choice([0, 4, 8, 12])), [None, "worker", "shard"][int(rng.integers(0, 3))])
        if _steady(ref["largest_model"], args, 0):
            rand.append(Case(N_("random budget, ranks and ledger"), args))
    return fixed + rand


def _hop_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("2 nodes of 8, fp32 all-reduce of the shard"), (1e9, 8, 2, 4, None)),
        Case(N_("2 nodes of 8, int8 packets"), (1e9, 8, 2, 4, 1.016)),
        Case(N_("16 nodes of 8, fp32"), (1e9, 8, 16, 4, None)),
        Case(N_("16 nodes of 8, int8 packets: every packet reaches every node"), (1e9, 8, 16, 4, 1.016)),
        Case(N_("4 nodes, a bf16 all-reduce"), (7e9, 4, 4, 2, None)),
        Case(N_("4 nodes, int4 packets"), (7e9, 4, 4, 2, 0.53)),
        Case(N_("one node: nothing crosses"), (1e9, 8, 1, 4, 1.016))]
    rand = []
    for _draw in range(6):
        rand.append(Case(N_("random model, nodes and packets"),
                         (float(10 ** rng.uniform(4, 11)), int(rng.choice([1, 2, 4, 8])), int(rng.integers(1, 65)),
                          float(rng.choice([2, 4])), [None, 1.016, 0.53, 0.04][int(rng.integers(0, 4))])))
    return fixed + rand


TASKS = [
    Task("09.1", "smallest_stage", 2, _stage_cases, _stage_compare, reveal=False),
    Task("09.2", "sharded_step_bytes", 2, _step_cases, number(rtol=1e-9), reveal=False),
    Task("09.3", "qgz_reduce_scatter", 3, _qgz_cases, array(rtol=1e-9, atol=1e-12)),
    Task("09.4", "largest_model", 2, _model_cases, number(rtol=0, atol=0), reveal=False),
    Task("09.5", "slow_link_bytes", 2, _hop_cases, number(rtol=1e-9), reveal=False),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "09.1": functools.partial(_stage_cases, hidden=True),
    "09.2": functools.partial(_step_cases, hidden=True),
    "09.3": functools.partial(_qgz_cases, hidden=True),
    "09.4": functools.partial(_model_cases, hidden=True),
    "09.5": functools.partial(_hop_cases, hidden=True),
}
### END HIDDEN TESTS
