"""Tests of exercise 08 (local steps): a test that tells a reversed outer step, the inner steps a link
needs, a SparseLoCo loop to fix, and three readings of a quorum log (whose reports count, what a
group missed and needs, an audit)."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, number, show


# 08.1: the grader's harness builds an outer step of the named kind and hands it to the learner's
# check_outer_step, which sees only the function. Every kind applies lr and momentum as DiLoCo's
# first outer step does; they differ in the average pseudo-gradient they form.
OUTER_HARNESS = """
import numpy as np

_asarray, _dtypes = np.asarray, {"float64": np.float64, "float32": np.float32}


def _average(kind, deltas):
    if kind in ("right", "reversed"):
        return deltas.mean(axis=0)
    if kind == "summed":
        return deltas.sum(axis=0)
    if kind == "flattened":
        return deltas.mean() + 0 * deltas[0]
    if kind == "first":
        return deltas[0]
    if kind == "reversed_summed":
        return deltas.sum(axis=0)
    raise ValueError(kind)


def _outer(kind, dtype):
    sign = -1 if kind.startswith("reversed") else 1

    def outer_step(theta, workers, lr, momentum):
        theta, workers = _asarray(theta, dtype=dtype), _asarray(workers, dtype=dtype)
        if theta.ndim != 1 or workers.ndim != 2 or workers.shape[1] != theta.shape[0]:
            raise ValueError("outer_step(theta, workers, lr, momentum) takes theta of shape (n,) "
                             "and workers of shape (N, n)")
        average = sign * _average(kind, theta - workers)
        buffer = average                       # the first outer step: the buffer starts as the average
        return (theta - dtype(lr) * (average + dtype(momentum) * buffer)).astype(dtype)
    return outer_step


def run(check_outer_step, implementation, dtype):
    verdict = check_outer_step(_outer(implementation, _dtypes[dtype]))
    return verdict if isinstance(verdict, str) else repr(verdict)
"""

_VERDICT = {"right": "right", "reversed": "reversed", "summed": "wrong", "flattened": "wrong", "first": "wrong",
            "reversed_summed": "wrong"}


def _outer_cases(rng, ref, hidden=False):
    if hidden:
        kinds = [str(k) for k in rng.choice(sorted(_VERDICT), 6)]
        return [Case(N_("another implementation"), (k, str(rng.choice(["float64", "float32"])))) for k in kinds]
    return [Case(N_("DiLoCo's own step"), ("right", "float64")),
            Case(N_("the sign of the pseudo-gradient reversed"), ("reversed", "float64")),
            Case(N_("DiLoCo's step, computed in float32"), ("right", "float32")),
            Case(N_("reversed, in float32"), ("reversed", "float32")),
            Case(N_("the pseudo-gradients summed, not averaged"), ("summed", "float64")),
            Case(N_("averaged over every entry at once"), ("flattened", "float64")),
            Case(N_("only the first worker's report"), ("first", "float64"))]


def _verdict_compare(expected, got, args):
    if got == expected:
        return None
    if got not in ("right", "reversed", "wrong"):
        return _("expected one of 'right', 'reversed', 'wrong', got {v}").format(v=show(got))
    return _("expected '{want}', got '{got}'").format(want=expected, got=got)


def _h_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("10B parameters, 8 workers, int8 over a 1 Gbit/s line, 90%"), (10e9, 8, 1.0, 1, 50e-6, 8, 0.9)),
        Case(N_("the same over 100 Gbit/s"), (10e9, 8, 1.0, 100, 50e-6, 8, 0.9)),
        Case(N_("fp32 over InfiniBand: data parallelism is enough"), (1e9, 8, 2.0, 400, 5e-6, 32, 0.9)),
        Case(N_("a small model on a slow line: latency counts"), (1e5, 16, 0.001, 0.1, 0.05, 32, 0.8)),
        Case(N_("two workers, 4-bit reports, 99%"), (7e9, 2, 2.0, 10, 1e-3, 4, 0.99))]
    rand = []
    while len(rand) < 5:
        args = (float(10 ** rng.uniform(4, 11)), int(rng.integers(2, 1025)), float(10 ** rng.uniform(-3, 1)),
                float(10 ** rng.uniform(-1, 3)), float(10 ** rng.uniform(-6, -1)), int(rng.choice([2, 4, 8, 16, 32])),
                float(rng.uniform(0.05, 0.995)))
        # a share a hair either way gives the same H: float rounding cannot decide the answer
        if len({ref["inner_steps_for"](*args[:6], args[6] * e) for e in (1 - 1e-6, 1, 1 + 1e-6)}) == 1:
            rand.append(Case(N_("random model, cluster and link"), args))
    return fixed + rand


def _targets(rng, shops, n):
    return rng.standard_normal((shops, n)) + rng.standard_normal(n)     # shops that share a common aim


def _sparseloco_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("one round: no ledger yet"), (_targets(np.random.default_rng(1), 3, 6), 2, 4, 0.1, 1)),
        Case(N_("the ledger must reach the next report"), (np.array([[1.0, 0.3, -0.2, 0.1], [0.6, -0.4, 0.2, 0.3]]),
                                                          1, 3, 0.2, 6)),
        Case(N_("several rounds: every round starts from head office"), (_targets(np.random.default_rng(2), 4, 8),
                                                                         3, 5, 0.05, 15)),
        Case(N_("k = n: plain local SGD"), (_targets(np.random.default_rng(3), 3, 5), 5, 2, 0.3, 4)),
        Case(N_("zero rounds"), (_targets(np.random.default_rng(4), 2, 3), 1, 3, 0.1, 0))]
    rand = []
    for _draw in range(4):
        shops, n = int(rng.integers(1, 9)), int(rng.integers(2, 300 if hidden else 40))
        rand.append(Case(N_("random shops"), (_targets(rng, shops, n), int(rng.integers(1, n + 1)),
                                              int(rng.integers(1, 12)), float(rng.uniform(0.005, 0.3)),
                                              int(rng.integers(1, 40 if hidden else 15)))))
    return fixed + rand


def _entry(step, members, recovering=()):
    return {"step": step, "members": sorted(members), "recovering": sorted(recovering)}


def _random_log(rng, groups, steps):
    """A log of `steps` quorums of `groups` replica groups going down and coming back; a group that
    comes back is usually, not always, listed as recovering (the audit's stale case)."""
    log, up = [], set(range(groups))
    for step in range(1, steps + 1):
        was = set(up)
        for g in range(groups):
            if rng.random() < 0.25:
                up ^= {g}
        if not up:
            up = {int(rng.integers(groups))}
        back = sorted(up - was)
        recovering = [g for g in back if rng.random() < 0.7]
        log.append(_entry(step, up, recovering))
    return log


LOG = [_entry(1, [0, 1, 2, 3]), _entry(2, [0, 1, 2, 3]), _entry(3, [0, 1, 3]), _entry(4, [0, 1, 3]),
       _entry(5, [0, 1, 2, 3], [2]), _entry(6, [0, 2, 3]), _entry(7, [0, 1, 2, 3]), _entry(8, [0, 1, 2])]


def _weights_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("everyone in, equal tokens"), (_entry(1, [0, 1, 2]), [100, 100, 100])),
        Case(N_("tokens weigh the members"), (_entry(2, [0, 1, 2]), [1000, 3000, 4000])),
        Case(N_("a group outside the quorum trained too"), (_entry(3, [0, 2]), [500, 900, 1500])),
        Case(N_("a recovering member"), (_entry(5, [0, 1, 2, 3], [2]), [4096, 4096, 4096, 2048])),
        Case(N_("two recovering, one usable"), (_entry(9, [1, 2, 4], [1, 4]), [10, 20, 30, 40, 50]))]
    rand = []
    for _draw in range(5):
        groups = int(rng.integers(1, 40 if hidden else 9))
        members = sorted(int(g) for g in rng.choice(groups, int(rng.integers(1, groups + 1)), replace=False))
        usable = int(rng.choice(members))
        recovering = [g for g in members if g != usable and rng.random() < 0.3]
        rand.append(Case(N_("random quorum and tokens"), (_entry(int(rng.integers(1, 1000)), members, recovering),
                                                          [int(t) for t in rng.integers(1, 10_000, size=groups)])))
    return fixed + rand


def _report_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("a group that was never away"), (LOG, 0)),
        Case(N_("away, then back and up to date"), (LOG, 2)),
        Case(N_("missing from the last step"), (LOG, 3)),
        Case(N_("missed a step in the middle, then took part again"), (LOG, 1)),
        Case(N_("a group that never took part"), (LOG, 7)),
        Case(N_("a member that recovered at the last step can send the state too"),
             ([_entry(1, [0, 1, 2, 3]), _entry(2, [0, 1, 3]), _entry(3, [0, 1, 2], [2])], 3)),
        Case(N_("away for the last three steps"), ([_entry(1, [0, 1]), _entry(2, [0]), _entry(3, [0, 2]),
                                                    _entry(4, [0, 2], [])], 1))]
    rand = []
    for _draw in range(5):
        groups = int(rng.integers(2, 30 if hidden else 6))
        log = _random_log(rng, groups, int(rng.integers(1, 200 if hidden else 15)))
        rand.append(Case(N_("random log"), (log, int(rng.integers(0, groups)))))
    return fixed + rand


def _audit_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("the log of the notebook"), (LOG,)),
        Case(N_("every return recovered"), ([_entry(1, [0, 1, 2]), _entry(2, [0, 1]), _entry(3, [0, 1, 2], [2])],)),
        Case(N_("back without recovering"), ([_entry(1, [0, 1, 2]), _entry(2, [0, 2]), _entry(3, [0, 1, 2]),
                                              _entry(4, [1, 2])],)),
        Case(N_("the whole quorum changed: the state is lost"), ([_entry(1, [0, 1, 2, 3]), _entry(2, [0, 1]),
                                                                  _entry(3, [2, 3], [2, 3]), _entry(4, [1, 2, 3])],)),
        Case(N_("a group alone with stale weights, then a recovery"), ([_entry(1, [0, 1]), _entry(2, [0]), _entry(3, [1]),
                                                             _entry(4, [0, 1], [0])],)),
        Case(N_("one step only"), ([_entry(1, [3, 5])],))]
    rand = []
    for _draw in range(5):
        groups = int(rng.integers(2, 30 if hidden else 6))
        rand.append(Case(N_("random log"), (_random_log(rng, groups, int(rng.integers(1, 200 if hidden else 15))),)))
    return fixed + rand


def _lists(keys):
    """A dict with exactly these keys, each a list (of ints or of [int, int] pairs) equal to the reference's."""
    def plain(v):
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, (bool, np.bool_)):
            return v
        if isinstance(v, (int, np.integer)) or (isinstance(v, (float, np.floating)) and float(v).is_integer()):
            return int(v)
        return v

    def compare(expected, got, args):
        if not isinstance(got, dict):
            return _("expected a dict with keys {keys}, got {v}").format(keys=", ".join(keys), v=show(got))
        if sorted(got) != sorted(keys):
            return _("expected the keys {keys}, got {got}").format(keys=", ".join(keys), got=", ".join(map(str, got)))
        for key in keys:
            if plain(got[key]) != plain(expected[key]):
                return _("{key}: expected {want}, got {got}").format(key=key, want=plain(expected[key]),
                                                                     got=plain(got[key]))
        return None
    return compare


TASKS = [
    Task("08.1", "check_outer_step", 3, _outer_cases, _verdict_compare, params=("implementation", "dtype"),
         harness=OUTER_HARNESS),
    Task("08.2", "inner_steps_for", 2, _h_cases, number(rtol=0, atol=0), reveal=False),
    Task("08.3", "sparseloco_train", 3, _sparseloco_cases, array(rtol=1e-6, atol=1e-9)),
    Task("08.4", "quorum_weights", 2, _weights_cases, array(dtype=np.float64, rtol=1e-9, atol=1e-12)),
    Task("08.5", "replica_report", 2, _report_cases, _lists(("missed", "behind", "peers"))),
    Task("08.6", "audit_log", 3, _audit_cases, _lists(("stale", "lost"))),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "08.1": functools.partial(_outer_cases, hidden=True),
    "08.2": functools.partial(_h_cases, hidden=True),
    "08.3": functools.partial(_sparseloco_cases, hidden=True),
    "08.4": functools.partial(_weights_cases, hidden=True),
    "08.5": functools.partial(_report_cases, hidden=True),
    "08.6": functools.partial(_audit_cases, hidden=True),
}
### END HIDDEN TESTS
