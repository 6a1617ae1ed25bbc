"""Chapter 04's numbers: the old ledger (error feedback) step by step, the story's demo
taken further, and Top-K with and without the ledger on a real task.

    >>> tr = ledger_trace(shop_adjustments(), k=2)
    >>> ice = tr.items.index("ice")           # heard + still in the ledger == everything
    >>> bool(np.isclose(tr.delivered("ice")[-1] + tr.after[-1, ice], tr.truth("ice")[-1]))
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..checks import check_grad, check_k
from ..compressors import Compressor, TopK
from ..feedback import ErrorFeedback
from ..index import ENCODINGS
from ..simulate import History, simulate
from ..checks import check_int
from ..i18n import N_, _
from ..tasks import Digits, Quadratic, Task

ITEMS = ("pearls", "sugar", "tea", "ice", "milk", "foam")
# How the story names them (shown through the catalog: 珍珠、糖度、茶底、冰、牛奶、奶盖)
# row and run names the chapter shows
SHOWN = (N_("the manager's estimate (1-byte index)"), N_("Top-K + ledger"), N_("Top-K, no ledger"), N_("R whole run"))
ITEM_NAMES = (N_("pearls"), N_("sugar"), N_("tea"), N_("ice"), N_("milk"), N_("foam"))


def shop_adjustments(nights: int = 12, seed: int = 3) -> tuple[tuple[str, ...], np.ndarray]:
    """One branch's taste adjustments, night by night: three big noisy items, one small
    steady one (customers want a little less ice, +0.3 every night) and two small noisy
    ones. Returns (item names, array [nights, items])."""
    check_int(nights, "nights", 1), check_int(seed, "seed", 0)
    rng = np.random.RandomState(seed)
    scale = np.array([1.0, 0.9, 0.7, 0.0, 0.1, 0.05])
    mean = np.array([0.0, 0.0, 0.0, 0.3, 0.0, 0.0])
    return ITEMS, mean + scale * rng.randn(nights, len(ITEMS))


@dataclass
class LedgerTrace:
    """Every night of a branch that reads its Top-k with the ledger, and (for contrast)
    the same branch without one. Arrays are [nights, items]."""
    items: list[str]
    k: int
    grads: np.ndarray      # the night's new adjustments g_t
    before: np.ndarray     # ledger before the night, e_t
    sent: np.ndarray       # what was read out: C(e_t + g_t)
    after: np.ndarray      # ledger after: e_t + g_t - C(e_t + g_t)
    sent_plain: np.ndarray  # without a ledger: C(g_t)

    @property
    def nights(self) -> int:
        return len(self.grads)

    def _col(self, item: str) -> int:
        if item not in self.items:
            raise KeyError(f"no item {item!r}; items are {self.items}")
        return self.items.index(item)

    def truth(self, item: str) -> np.ndarray:
        """Running total of the real adjustments of `item`."""
        return np.cumsum(self.grads[:, self._col(item)])

    def delivered(self, item: str, ledger: bool = True) -> np.ndarray:
        """Running total that head office has heard for `item`."""
        return np.cumsum((self.sent if ledger else self.sent_plain)[:, self._col(item)])

    def night(self, t: int) -> dict:
        """Night t (0-based) in plain numbers, for tables and widgets."""
        if not 0 <= t < self.nights:
            raise ValueError(f"night must be in [0, {self.nights - 1}], got {t}")
        return {"night": t + 1, "new": self.grads[t], "ledger before": self.before[t],
                "to choose from": self.before[t] + self.grads[t], "read out": self.sent[t],
                "ledger after": self.after[t], "chosen": [self.items[i] for i in np.flatnonzero(self.sent[t])]}


def ledger_trace(adjustments=None, k: int = 2, compressor: Compressor | None = None) -> LedgerTrace:
    """Run a branch's nights through `ErrorFeedback(TopK(k))` (or `compressor`) and record
    the ledger before and after each night; also the same nights without the ledger.
    `adjustments`: (names, [nights, items] array) as from `shop_adjustments`, or an array."""
    names, grads = adjustments if isinstance(adjustments, tuple) else (None, adjustments)
    if grads is None:
        names, grads = shop_adjustments()
    grads = np.asarray(grads, dtype=np.float64)
    if grads.ndim != 2 or grads.shape[0] < 1 or grads.shape[1] < 1:
        raise ValueError(f"adjustments must be a [nights, items] array, got shape {grads.shape}")
    names = list(names) if names is not None else [f"item {i}" for i in range(grads.shape[1])]
    comp = compressor if compressor is not None else TopK(k=check_k(k, grads.shape[1]))
    ef, plain = ErrorFeedback(comp), comp
    before, sent, after, sent_plain = [], [], [], []
    for g in grads:
        g = torch.from_numpy(g.copy())
        before.append(np.zeros_like(g.numpy()) if ef.residual is None else ef.residual.numpy().copy())
        sent.append(ef.decompress(ef.compress(g)).numpy().copy())
        after.append(ef.residual.numpy().copy())
        sent_plain.append(plain.decompress(plain.compress(g)).numpy().copy())
    return LedgerTrace(names, k, grads, np.array(before), np.array(sent), np.array(after), np.array(sent_plain))


# -- the story's demo, taken further ----------------------------------------------------

def bits_to_address(n: int) -> int:
    """Bits an absolute index needs to name one of n positions: ceil(log2 n)."""
    check_int(n, "n", 1)
    return max(1, math.ceil(math.log2(n)))


def story_index_costs(steps: int = 60, n_params: int = 1000, k: int = 100, lr: float = 0.1,
                     seed: int = 42) -> list[dict]:
    """The story's demo (Top-K + ledger on its quadratic) run once per index encoding:
    the real packet bytes per step and the real saving against 4-byte dense values."""
    task = Quadratic(n_params, seed, dtype=torch.float32)
    dense = n_params * 4
    rows = [{"encoding": "the manager's estimate (1-byte index)", "bytes per step": k * 5, "saving": dense / (k * 5)}]
    for enc in ENCODINGS:
        h = simulate(task, TopK(k=k, index=enc), workers=1, steps=steps, lr=lr, batch=None,
                     progress=False, eval_every=steps, device="cpu")
        per_step = h.total_bytes / h.steps
        rows.append({"encoding": enc, "bytes per step": per_step, "saving": dense / per_step,
                     "final error": h.final("error")})
    return rows


def contraction(tensor: torch.Tensor, k: int) -> tuple[float, float]:
    """(||x - topk(x)||^2, (1 - k/d) ||x||^2): Top-K is a k-contraction, the property the
    convergence proof of Stich et al. (2018) needs; the first is never above the second."""
    x = check_grad(tensor).reshape(-1).double()
    k = check_k(k, x.numel())
    comp = TopK(k=k)
    left = float((x - comp.decompress(comp.compress(x))).pow(2).sum())
    return left, (1 - k / x.numel()) * float(x.pow(2).sum())


def _one_thread():
    # The digits model is tiny: a second thread only adds synchronisation, which costs a
    # lot when the cores are shared. Restored afterwards.
    from ..threads import one_thread
    return one_thread()


def compare_feedback(task: Task | None = None, ratio: float = 0.01, workers: int = 16, steps: int = 300,
                     lr: float = 0.1, seed: int = 0, progress: bool = True) -> dict[str, History]:
    """Dense SGD, Top-K with the ledger and Top-K without it, on `task` (the digits
    classifier by default) with `workers` simulated workers: same data, same steps."""
    task = task if task is not None else Digits()
    run = dict(workers=workers, steps=steps, lr=lr, seed=seed, progress=progress)
    with _one_thread():
        return {"dense": simulate(task, None, **run),
                "Top-K + ledger": simulate(task, TopK(ratio), error_feedback=True, **run),
                "Top-K, no ledger": simulate(task, TopK(ratio), error_feedback=False, **run)}


def demo_sentence(demo) -> str:
    """The story demo's distances to the optimum, and where the ledger run ends against dense
    SGD (closer, further, or level), from the run's own numbers."""
    from . import verdicts
    text = _("Distance to the optimum after 60 steps: dense **{d:.4f}**, Top-K with the ledger **{e:.4f}**, Top-K "
             "without it **{p:.2f}**.").format(d=demo.dense_error, e=demo.topk_ef_error, p=demo.topk_error)
    said = verdicts.gap(demo.topk_ef_error, demo.dense_error, _("dense SGD"), higher_is_better=False, unit="",
                        scale=1, digits=4)
    text += " " + _("With the ledger, Top-K ends {said} (a smaller distance is better).").format(said=said)
    return verdicts.tidy(text)


def feedback_sentence(runs: dict, digits: int = 3) -> str:
    """`compare_feedback`'s runs in words: each Top-K run's accuracy against dense (ahead or
    behind, in points) and what the ledger did. Each accuracy is first rounded to `digits`
    decimals (3: 95.6%), as the table beside the sentence shows it, so that the points the
    sentence states are the difference of the numbers the reader sees."""
    from . import verdicts
    acc = {k: round(h.final("accuracy"), digits) for k, h in runs.items()}
    text = _("Sending about {r:.0f}x fewer bytes, Top-K with the ledger ends **{ef}** in accuracy; without the ledger "
             "it ends {plain} after the same steps.").format(
        r=runs["Top-K + ledger"].ratio, ef=verdicts.gap(acc["Top-K + ledger"], acc["dense"], _("dense SGD")),
        plain=verdicts.gap(acc["Top-K, no ledger"], acc["dense"], _("dense SGD")))
    text += " " + _("The ledger {said}.").format(said=verdicts.effect(acc["Top-K + ledger"], acc["Top-K, no ledger"]))
    return verdicts.tidy(text)


@dataclass
class StoryDemo:
    """The story's toy demo re-run through the library: final distances ||w - w*||."""
    dense_error: float
    topk_ef_error: float
    topk_error: float          # the same Top-K without the ledger, for contrast
    story_ratio: float          # the story's own estimate: 4-byte values + 1-byte indices
    wire_ratio: float          # dense bytes / the packets' real bytes
    dense: History
    topk_ef: History
    topk: History

    def __repr__(self) -> str:
        return "StoryDemo(" + _("dense error {dense:.4f}, Top-K+EF error {ef:.4f}, Top-K without EF {topk:.4f}; "
                               "savings: the manager's estimate {story:.1f}x, real packets {wire:.2f}x").format(
            dense=self.dense_error, ef=self.topk_ef_error, topk=self.topk_error, story=self.story_ratio,
            wire=self.wire_ratio) + ")"


def story_demo(steps: int = 60, n_params: int = 1000, k: int = 100, lr: float = 0.1, seed: int = 42,
              dtype: torch.dtype = torch.float32) -> StoryDemo:
    """The story's demo: w starts at 0, gradient w - w*, 60 steps of lr 0.1, dense vs Top-K
    (k=100 of 1000) with error feedback. One worker, full gradient.

    >>> round(story_demo().dense_error, 4)
    0.0556
    """
    task = Quadratic(n_params, seed, dtype=dtype)
    run = dict(workers=1, steps=steps, lr=lr, batch=None, progress=False, eval_every=steps, device="cpu")
    dense = simulate(task, None, **run)
    ef = simulate(task, TopK(k=k), error_feedback=True, **run)
    plain = simulate(task, TopK(k=k), error_feedback=False, **run)
    story_ratio = (steps * n_params * 4) / (steps * k * (4 + 1))   # the story's own byte count
    return StoryDemo(dense.final("error"), ef.final("error"), plain.final("error"), story_ratio, ef.ratio,
                    dense, ef, plain)


# -- EF21: when the workers' data disagree ----------------------------------------------

EF21_RUNS = (N_("dense gradient descent"), N_("Top-K + classic ledger"), N_("Top-K + EF21"))


@dataclass
class EF21Case:
    """Classic error feedback against EF21 on `Targets` (workers whose optima differ), over
    several seeds: `errors[run]` is [seeds, eval points] of the distance to the optimum of
    the average loss, at `steps_at`."""
    seeds: list
    steps_at: np.ndarray
    errors: dict
    k: int
    n_params: int
    workers: int
    lr: float

    def halfway(self, run: str) -> np.ndarray:
        """Per seed: the distance at the end over the distance halfway (below 1: still closing in)."""
        e = self.errors[run]
        return e[:, -1] / e[:, e.shape[1] // 2]


def ef21_case(seeds=range(3), *, n_params: int = 100, workers: int = 8, k: int = 5, spread: float = 3.0,
              lr: float = 0.1, steps: int = 200, eval_every: int = 10) -> EF21Case:
    """Full-gradient training of `Targets(n_params, workers, spread, seed)` for each seed:
    dense gradient descent, Top-K (k of n_params) with the classic ledger, and Top-K with
    EF21, at the same constant learning rate and the same bytes (one Top-K packet per worker
    and step for both ledgers)."""
    from ..ef21 import EF21
    from ..tasks import Targets
    check_k(k, n_params)
    errors = {name: [] for name in EF21_RUNS}
    steps_at = None
    with _one_thread():
        for seed in seeds:
            task = Targets(n_params, workers, spread=spread, seed=seed)
            run = dict(workers=workers, steps=steps, lr=lr, batch=None, progress=False, eval_every=eval_every,
                       device="cpu")
            for name, comp, ef in zip(EF21_RUNS, (None, TopK(k=k), EF21(TopK(k=k))), (False, True, False)):
                h = simulate(task, comp, error_feedback=ef, **run)
                errors[name].append(h.evals["error"])
                steps_at = np.asarray(h.eval_steps)
    return EF21Case(list(seeds), steps_at, {n: np.asarray(v) for n, v in errors.items()}, k, n_params, workers, lr)


def ef21_sentence(case: EF21Case) -> str:
    """Each ledger's distance to the optimum halfway and at the end, and whether it was still
    closing in over the second half of the run (the end below half the halfway value) in how
    many seeds: the words turn with the numbers."""
    n = len(case.seeds)
    parts = [_("Over {n} seeds, {workers} workers sending {k} of {d} entries each, at a constant learning "
               "rate {lr:g}:").format(n=n, workers=case.workers, k=case.k, d=case.n_params, lr=case.lr)]
    for run in EF21_RUNS[1:]:
        e, closing = case.errors[run], int((case.halfway(run) < 0.5).sum())
        mid, end = np.median(e[:, e.shape[1] // 2]), e[:, -1]
        if closing == n:
            said = _("it was still closing in over the second half in every seed")
        elif closing == 0:
            said = _("it stopped closing in: in no seed did the second half halve the distance")
        else:
            said = _("it was still closing in over the second half in {m} of {n} seeds").format(m=closing, n=n)
        parts.append(_("**{run}** ends between {lo:.2g} and {hi:.2g} from the optimum (median halfway: "
                       "{mid:.2g}, at the start: {start:.3g}); {said}.").format(
            run=_(run), lo=end.min(), hi=end.max(), mid=mid, start=float(np.median(e[:, 0])), said=said))
    from . import verdicts
    return verdicts.tidy(" ".join(parts))
