"""Tests of exercise 05 (quantization): a blockwise quantizer that never overflows, the chunk that pays,
the small push predicted, int4 packing head office reads back, sign with a ledger, a QSGD encoder
(checked by its statistics), and 1-bit Adam's traffic over a whole run."""
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


def _chunk_steps(x, chunk, scales):
    """The scale of every entry's chunk, as float64, in the shape of x."""
    n = int(np.size(x))
    size = n if chunk is None else min(int(chunk), n)
    return np.repeat(np.asarray(scales, np.float64), size)[:n].reshape(np.shape(x))


def _quantize_compare(expected, got, args):
    x, bits = args[0], args[1]
    chunk = args[2] if len(args) > 2 else None
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        return _("expected a tuple (codes, scales), got {v}").format(v=show(got))
    codes, scales = got
    if isinstance(scales, np.ndarray) and scales.dtype != np.float32:
        return _("scales: expected dtype float32 (4 bytes each on the wire), got {dtype}").format(dtype=scales.dtype)
    problem = array(dtype=np.float32, rtol=1e-6)(expected[1], scales, args)
    if problem:
        return _("scales: {problem}").format(problem=problem)
    steps = _chunk_steps(x, chunk, expected[1])
    y = np.where(steps > 0, np.asarray(x, np.float64) / np.where(steps > 0, steps, 1.0), 0.0)
    problem = _codes_problem(expected[0], codes, y, bits)
    if problem:
        return problem
    err = np.abs(codes.astype(np.float64) * steps - np.asarray(x, np.float64))
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else None
    if worst is not None and err[worst] > steps[worst] / 2 * (1 + 1e-4):
        return _("entry {i}: x = {x} decodes to {back}; the error {err} is more than half a step ({half})").format(
            i=list(worst), x=show(np.asarray(x)[worst]), back=show(codes[worst] * steps[worst]), err=show(err[worst]),
            half=show(steps[worst] / 2))
    return None


def _quantize_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("the biggest value maps to +127"), (np.array([0.5, -0.25, 1.0, 0.0], np.float32), 8)),
        Case(N_("a chunk whose largest magnitude is negative"), (np.array([0.5, -0.2, 0.9, 0.1, 0.3, -2.0, 0.7, 0.1],
                                                                       np.float32), 8, 4)),
        Case(N_("a chunk of zeros (blank pixels)"), (np.array([0.4, -0.1, 0.0, 0.0, 0.0, 0.0, 0.2, 0.3], np.float32), 8, 2)),
        Case(N_("a chunk of only negative values"), (np.array([0.3, 0.6, -0.1, -0.5, -0.2, -0.9], np.float32), 4, 3)),
        Case(N_("all zeros, one scale"), (np.zeros(6, np.float32), 8)),
        Case(N_("4 bits, a last chunk shorter than the others"), (np.linspace(-1, 1, 9).astype(np.float32), 4, 4)),
        Case(N_("2 bits and a 2-D input, chunks across its rows"), (np.array([[0.2, -0.9, 0.1], [0.45, 0.9, -0.3]]), 2, 4)),
        Case(N_("a chunk larger than the tensor"), (np.array([0.1, -2.0, 0.7], np.float32), 8, 1024))]
    rand = []
    for bits in (8, 8, 4, 3):
        n = int(rng.integers(1, 4000 if hidden else 200))
        x = rng.standard_normal(n).astype(rng.choice([np.float32, np.float64])) * float(rng.uniform(1e-4, 10))
        x[rng.random(n) < 0.1] = 0.0
        chunk = None if rng.random() < 0.25 else int(rng.integers(1, n + 1))
        rand.append(Case(N_("random gradient and chunk"), (x, int(bits)) if chunk is None else (x, int(bits), chunk)))
    return fixed + rand


def _spiky(seed, n, outlier):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    x[n // 3] = outlier
    return x


def _chunk_cases(rng, ref, hidden=False):
    spiky = _spiky(1, 4096, 100.0)
    fixed = [] if hidden else [
        Case(N_("one outlier, int4, error at most 30%"), (spiky, 4, [16, 64, 256, 1024, 4096], 0.3)),
        Case(N_("one outlier, int4, error at most 10%"), (spiky, 4, [16, 64, 256, 1024, 4096], 0.1)),
        Case(N_("no outlier, int8: one scale is enough"), (_spiky(2, 2048, 1.0), 8, [32, 256, 2048], 0.01)),
        Case(N_("a small tensor: every scale costs 4 bytes"), (_spiky(3, 16, 2.0), 8, [1, 4, 16], 0.05)),
        Case(N_("2 bits, a bound only small chunks meet"), (_spiky(4, 1000, 30.0), 2, [10, 100, 1000], 0.45)),
        Case(N_("5 bits: codes that straddle bytes"), (_spiky(5, 999, 8.0), 5, [3, 37, 333, 999], 0.06))]
    rand = []
    while len(rand) < 4:
        n = int(rng.integers(8, 3000 if hidden else 400))
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.integers(0, n, int(rng.integers(0, 4)))] *= float(rng.uniform(5, 100))
        bits = int(rng.choice([2, 3, 4, 8]))
        counts = sorted({int(c) for c in np.unique(np.geomspace(1, n, 5).astype(int))})
        chunks = sorted({-(-n // c) for c in counts}, reverse=True)    # chunk sizes giving different counts
        chunks = [c for i, c in enumerate(chunks) if i == 0 or -(-n // c) != -(-n // chunks[i - 1])]
        bound = float(rng.uniform(0.02, 0.6))
        # the answer must not hang on a hair of the bound, and some candidate must meet it
        picks = {ref["best_chunk"](x, bits, chunks, bound * e) for e in (1 - 1e-4, 1, 1 + 1e-4)}
        if len(picks) == 1 and None not in picks:
            rand.append(Case(N_("random gradient, bits and bound"), (x, bits, chunks, bound)))
    return fixed + rand


def _push_cases(rng, ref, hidden=False):
    fixed = [] if hidden else [
        Case(N_("chapter 05: 0.002 on an 8-bit grid of step 1/127, 200 nights"), (0.002, 1 / 127, 200)),
        Case(N_("a push a little over half a step"), (0.6, 1.0, 50)),
        Case(N_("a negative push"), (-0.3, 0.5, 10)),
        Case(N_("a push larger than a step"), (2.3, 1.0, 1000)),
        Case(N_("a push on the grid: no noise"), (0.75, 0.25, 40)),
        Case(N_("one night"), (-1.7, 1.0, 1))]
    rand = []
    while len(rand) < 4:
        scale, nights = float(10 ** rng.uniform(-4, 0)), int(rng.integers(1, 10_000))
        steps = float(rng.uniform(-5, 5))
        # never halfway between two grid points, and no -0.0 from rounding a small negative push
        if abs(steps - np.floor(steps) - 0.5) > 1e-3 and not -0.5 < steps < 0:
            rand.append(Case(N_("random push, step and nights"), (steps * scale, scale, nights)))
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
    Task("05.2", "best_chunk", 2, _chunk_cases, several(number(rtol=0, atol=0), number(rtol=0, atol=0),
                                                          names=("chunk", "nbytes"))),
    Task("05.3", "small_push", 2, _push_cases,
         several(number(rtol=1e-9, atol=1e-12), number(rtol=1e-9, atol=1e-12), number(rtol=1e-9, atol=1e-12),
                 names=("nearest_total", "stochastic_mean", "stochastic_std")), reveal=False, digits=4),
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
    "05.2": functools.partial(_chunk_cases, hidden=True),
    "05.3": functools.partial(_push_cases, hidden=True),
    "05.4": functools.partial(_pack_cases, hidden=True),
    "05.5": functools.partial(_sign_cases, hidden=True),
    "05.6": functools.partial(_qsgd_cases, hidden=True),
    "05.7": functools.partial(_traffic_cases, hidden=True),
}
### END HIDDEN TESTS
