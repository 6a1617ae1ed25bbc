"""Tests of exercise 05 (quantization): absmax int8, dequantize, stochastic, int4 packing, sign with a
ledger, a QSGD encoder (checked by its statistics), and 1-bit Adam's traffic over a whole run."""
import functools

import numpy as np

from milktea.i18n import N_, _
from milktea.grade.spec import Case, Task, array, byte_array, number, several, show


def _levels(bits):
    return 2 ** (int(bits) - 1) - 1


def _codes_problem(expected, got, y, bits):
    """`got` must equal the reference codes, except by one step where the exact value sits on
    a rounding boundary (float order of operations may tip it either way)."""
    if not isinstance(got, np.ndarray):
        return _("codes: expected a numpy array, got {v}").format(v=show(got))
    if got.dtype != np.int8:
        return _("codes: expected dtype int8 (one byte each on the wire), got {dtype}").format(dtype=got.dtype)
    if got.shape != expected.shape:
        return _("codes: expected shape {want}, got {got}").format(want=tuple(expected.shape), got=tuple(got.shape))
    L = _levels(bits)
    if np.abs(got.astype(np.int64)).max(initial=0) > L:
        return _("codes: {bits}-bit codes must lie in [-{L}, {L}], got {lo}..{hi}").format(
            bits=bits, L=L, lo=int(got.min()), hi=int(got.max()))
    diff = got.astype(np.int64) - expected.astype(np.int64)
    tie = np.abs(np.abs(y - np.floor(y)) - 0.5) < 1e-4
    bad = (diff != 0) & ~((np.abs(diff) == 1) & tie)
    if not bad.any():
        return None
    i = tuple(np.argwhere(bad)[0])
    return _("codes: entry {at}: expected {want}, got {got} ({n} of {size} differ)").format(
        at=list(i), want=int(expected[i]), got=int(got[i]), n=int(bad.sum()), size=bad.size)


def _quantize_compare(expected, got, args):
    x, bits = args
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        return _("expected a tuple (codes, scale), got {v}").format(v=show(got))
    codes, scale = got
    problem = number(rtol=1e-6)(expected[1], scale, args)
    if problem:
        return _("scale: {problem}").format(problem=problem)
    s = float(expected[1])
    y = np.asarray(x, np.float64) / s if s > 0 else np.zeros(np.shape(x))
    problem = _codes_problem(expected[0], codes, y, bits)
    if problem or s == 0:
        return problem
    err = np.abs(codes.astype(np.float64) * s - np.asarray(x, np.float64))
    worst = int(np.argmax(err))
    if err.flat[worst] > s / 2 * (1 + 1e-4):
        return _("entry {i}: x = {x} decodes to {back}; the error {err} is more than half a step ({half})").format(
            i=worst, x=show(np.ravel(x)[worst]), back=show(codes.flat[worst] * s), err=show(err.flat[worst]),
            half=show(s / 2))
    return None


def _stochastic_compare(expected, got, args):
    x, scale, u, bits = args
    y = np.asarray(x, np.float64) / scale + u
    return _codes_problem(expected, got, y - 0.5, bits)   # boundaries of floor(y) sit at y - 0.5 = k + 0.5


def _quantize_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("the biggest value maps to +127"), (np.array([0.5, -0.25, 1.0, 0.0], np.float32), 8)),
             Case(N_("all zeros: scale 0, codes 0"), (np.zeros(6, np.float32), 8)),
             Case(N_("a negative absmax"), (np.array([0.1, -2.0, 0.7], np.float32), 8)),
             Case(N_("4 bits: 7 levels each side"), (np.linspace(-1, 1, 9).astype(np.float32), 4)),
             Case(N_("2 bits and a 2-D input"), (np.array([[0.2, -0.9], [0.45, 0.9]]), 2))]
    rand = [Case(N_("random gradient"), (rng.standard_normal(int(rng.integers(1, 4000 if hidden else 200))).astype(rng.choice([np.float32, np.float64]))
                                     * float(rng.uniform(1e-4, 10)), int(bits))) for bits in (8, 8, 4, 3)]
    return fixed + rand


def _dequantize_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("codes and a scale"), (np.array([127, -64, 0, 1], np.int8), 0.01)),
             Case(N_("scale 0"), (np.array([0, 0], np.int8), 0.0))]
    rand = [Case(N_("random codes"), (rng.integers(-127, 128, int(rng.integers(1, 3000 if hidden else 200))).astype(np.int8),
                                  float(rng.uniform(1e-5, 1)))) for _draw in range(4)]
    return fixed + rand


def _stochastic_cases(rng, ref, hidden=False):
    x = np.array([0.3, -0.3, 1.0, -1.0, 0.0], np.float32)
    fixed = [] if hidden else [Case(N_("u = 0: always round down"), (x, 0.1, np.zeros(5), 8)),
             Case(N_("u close to 1: round up unless exact"), (x, 0.1, np.full(5, 0.999), 8)),
             Case(N_("values beyond the range are clipped"), (np.array([2.0, -2.0], np.float32), 0.01, np.array([0.5, 0.5]), 8))]
    rand = []
    for bits in (8, 8, 4, 6):
        n = int(rng.integers(1, 3000 if hidden else 200))
        x = rng.standard_normal(n).astype(np.float32)
        scale = float(np.abs(x).max() / _levels(bits))
        rand.append(Case(N_("random gradient and noise"), (x, scale, rng.random(n), bits)))
    return fixed + rand


def _pack_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("two codes in one byte"), (np.array([1, -1], np.int8),)),
             Case(N_("an odd count: the last high nibble is 0"), (np.array([7, -7, 3], np.int8),)),
             Case(N_("a single code"), (np.array([-7], np.int8),)),
             Case(N_("no codes"), (np.zeros(0, np.int8),))]
    rand = [Case(N_("random 4-bit codes"), (rng.integers(-7, 8, int(rng.integers(1, 5000 if hidden else 200))).astype(np.int8),))
            for _draw in range(4)]
    return fixed + rand


def _sign_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [Case(N_("empty ledger"), (np.array([0.3, -0.1, 0.05, -0.6]), np.zeros(4))),
             Case(N_("a zero entry is sent as +scale"), (np.array([0.0, 1.0, -1.0]), np.zeros(3))),
             Case(N_("the ledger flips a sign"), (np.array([0.1, 0.1]), np.array([-0.5, 0.0]))),
             Case(N_("a matrix"), (np.arange(-6.0, 6.0).reshape(3, 4) / 7, np.full((3, 4), 0.01))),
             Case(N_("all zeros"), (np.zeros(5), np.zeros(5)))]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(1, 3000 if hidden else 200))
        rand.append(Case(N_("random gradient and ledger"), (rng.standard_normal(n) * rng.uniform(1e-4, 1),
                                                        rng.standard_normal(n) * rng.uniform(0, 1e-2))))
    return fixed + rand


def _sign_compare(expected, got, args):
    problem = several(array(rtol=1e-9, atol=1e-12), array(rtol=1e-9, atol=1e-12),
                      names=("sent", "new_residual"))(expected, got, args)
    if problem:
        return problem
    total = np.asarray(args[0], np.float64) + np.asarray(args[1], np.float64)
    if not np.allclose(np.asarray(got[0], np.float64) + np.asarray(got[1], np.float64), total, atol=1e-12):
        return _("sent + new_residual must equal grad + residual: something was lost")
    return None



# QSGD: the grader's harness calls the learner's encoder DRAWS times on the same x, each time with
# fresh noise u from the case's own seed, and sends every (norm, codes) back; the statistics are
# computed here, in the grader's process: any unbiased encoder onto the levels norm * l / s passes,
# whatever way it uses u, as long as its variance stays under QSGD's bound.
QSGD_HARNESS = """
import numpy as np

_rng, _asarray, _int8 = np.random.default_rng, np.asarray, np.int8


def run(encode, x, s, u_seed, draws=200):
    x = _asarray(x, dtype=np.float64)
    rng, norms, codes = _rng(u_seed), [], []
    for _ in range(draws):
        norm, c = encode(x.copy(), s, rng.random(x.shape))
        c = _asarray(c)
        if c.shape != x.shape or c.dtype.kind not in "iu":
            raise TypeError("codes must be an integer array of the shape of x, got " + str(c.dtype) + " " + str(c.shape))
        if c.size and int(abs(c.astype(np.int64)).max()) > s:
            raise ValueError("codes must lie in [-s, s]; got " + str(int(abs(c.astype(np.int64)).max())) + " for s = " + str(s))
        norms.append(float(norm))
        codes.append(c.astype(_int8))
    return np.array(norms), np.stack(codes)
"""


def _qsgd_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("4 levels, 50 Gaussian entries"), (np.random.default_rng(1).standard_normal(50), 4), {"u_seed": 1}),
        Case(N_("1 level: every entry is 0 or +-norm"), (np.random.default_rng(2).standard_normal(20), 1), {"u_seed": 2}),
        Case(N_("a spike and small entries"), (np.r_[5.0, np.full(30, 0.3)], 8), {"u_seed": 3}),
        Case(N_("entries that sit on the grid already"), (np.array([3.0, 0.0, -4.0]), 5), {"u_seed": 4}),
        Case(N_("a single entry"), (np.array([-0.7]), 2), {"u_seed": 5})]
    rand = []
    for _draw in range(4):
        n = int(rng.integers(2, 300 if hidden else 64))
        x = rng.standard_normal(n) * float(10 ** rng.uniform(-3, 2))
        rand.append(Case(N_("random gradient and levels"), (x, int(rng.integers(1, 17))), {"u_seed": int(rng.integers(1 << 30))}))
    return fixed + rand


def _qsgd_compare(expected, got, args):
    x, s = np.asarray(args[0], np.float64), int(args[1])
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        return _("the encoder's results could not be read: {v}").format(v=show(got))
    norms, codes = np.asarray(got[0], np.float64), np.asarray(got[1], np.float64)
    length = float(np.sqrt(np.sum(x * x)))
    if np.any(np.abs(norms - length) > 1e-5 * length + 1e-12):
        return _("norm: expected {want} (the 2-norm of x), got {v}").format(want=show(length), v=show(float(norms[0])))
    draws, n = codes.shape
    decoded = length * codes / s
    err = decoded - x
    if length == 0.0:
        return None if not np.any(codes) else _("x is all zeros: every code must be 0")
    # unbiased: the mean of the draws is within noise of x (noise judged from the draws' own spread)
    bias = float(np.sum(err.mean(axis=0) ** 2))
    noise = float(np.sum(decoded.var(axis=0, ddof=1))) / draws
    if bias > (4 + 20 / n) * noise + 1e-20 * length ** 2:
        worst = int(np.argmax(np.abs(err.mean(axis=0))))
        return _("biased: over {d} draws entry {i} (x = {x}) decodes on average to {v}; "
                 "an unbiased encoder averages to x").format(d=draws, i=worst, x=show(x[worst]),
                                                              v=show(float(decoded[:, worst].mean())))
    # QSGD's variance bound, with room for the sampling noise of the draws
    per_draw = np.sum(err ** 2, axis=1)
    bound = min(n / s ** 2, np.sqrt(n) / s) * length ** 2
    if per_draw.mean() > bound + 4 * per_draw.std(ddof=1) / np.sqrt(draws) + 1e-12 * length ** 2:
        return _("variance too large: E||Q(x) - x||^2 is about {v}, QSGD's bound is {b}").format(
            v=show(float(per_draw.mean())), b=show(bound))
    return None


def _traffic_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("the chapter's run: 60 steps, 12 of warm-up"), (2410, 4, 60, 12)),
        Case(N_("no warm-up at all"), (1_000_000, 8, 100, 0)),
        Case(N_("warm-up all the way: nothing saved"), (1000, 4, 50, 50)),
        Case(N_("DeepSpeed's advice: 15% warm-up, 25M parameters on 64 workers"), (25_000_000, 64, 10_000, 1500)),
        Case(N_("chunks that do not divide evenly"), (1001, 3, 10, 2))]
    rand = []
    for _draw in range(4):
        workers = int(rng.integers(2, 1025))
        n, steps = int(rng.integers(workers, 10 ** 9)), int(rng.integers(1, 100_000))
        rand.append(Case(N_("random run"), (n, workers, steps, int(rng.integers(0, steps + 1)))))
    return fixed + rand


TASKS = [
    Task("05.1", "absmax_quantize", 3, _quantize_cases, _quantize_compare),
    Task("05.2", "dequantize", 1, _dequantize_cases, array(dtype=np.float32, rtol=1e-6)),
    Task("05.3", "stochastic_quantize", 2, _stochastic_cases, _stochastic_compare),
    Task("05.4", "pack_int4", 2, _pack_cases, byte_array()),
    Task("05.5", "sign_ef_step", 3, _sign_cases, _sign_compare),
    Task("05.6", "qsgd_encode", 3, _qsgd_cases, _qsgd_compare, params=("x", "s"), harness=QSGD_HARNESS),
    Task("05.7", "onebit_adam_traffic", 2, _traffic_cases,
         several(number(rtol=1e-9), number(rtol=1e-9), names=("per_step", "whole_run"))),
]


### BEGIN HIDDEN TESTS
# larger random cases, drawn from the grader's own seed (the public ones stay small: they ship)
HIDDEN = {
    "05.1": functools.partial(_quantize_cases, hidden=True),
    "05.2": functools.partial(_dequantize_cases, hidden=True),
    "05.3": functools.partial(_stochastic_cases, hidden=True),
    "05.4": functools.partial(_pack_cases, hidden=True),
    "05.5": functools.partial(_sign_cases, hidden=True),
    "05.6": functools.partial(_qsgd_cases, hidden=True),
    "05.7": functools.partial(_traffic_cases, hidden=True),
}
### END HIDDEN TESTS
