"""Exercise 08's graded tasks tell right from plausibly wrong: the master's answers pass every
public and hidden case, and each task has at least three wrong answers a learner could
write (a flipped sign, a forgotten ledger, a plain mean where tokens should weigh, ...),
each of which the task's own cases catch. Runs in this process: the cases and the expected
outputs are built as the grader builds them (milktea.grade.prepare), no sandbox needed."""
import numpy as np
import pytest

from _grade_helpers import prepared


def _topk(total, k):
    mags = np.abs(total)
    threshold = np.partition(mags.ravel(), mags.size - k)[mags.size - k]
    return np.where(mags >= threshold, total, 0).astype(total.dtype)


def _outer(sign=-1, nesterov=True, fresh_buffer=True, lr_inside=False):
    def outer_step(theta, delta, buffer, lr, momentum):
        step = lr * delta if lr_inside else delta
        new = np.array(step, copy=True) if buffer is None else momentum * buffer + step
        u = (delta if not lr_inside else lr * delta) + momentum * (new if fresh_buffer else
                                                                    (np.zeros_like(delta) if buffer is None else buffer))
        if not nesterov:
            u = new
        return (theta + sign * (u if lr_inside else lr * u)).astype(theta.dtype), new.astype(theta.dtype)
    return outer_step


def _bytes(forget_h=False, bits_as_bytes=False, index_always=False, h_times=False):
    def bytes_per_token(params, inner_steps, tokens_per_step, bits, density, index_bytes):
        per_value = (bits if bits_as_bytes else bits / 8) + (index_bytes if density < 1 or index_always else 0)
        report = params * density * per_value
        steps = 1 if forget_h else inner_steps
        return float(report * steps / tokens_per_step) if h_times else float(report / (steps * tokens_per_step))
    return bytes_per_token


def _report(flip=False, no_ledger_in=False, keep_total=False, by_value=False):
    def report_with_ledger(theta_global, theta_local, ledger, k):
        delta = (theta_local - theta_global) if flip else (theta_global - theta_local)
        total = delta if no_ledger_in else ledger + delta
        if by_value:
            threshold = np.partition(total.ravel(), total.size - k)[total.size - k]
            sent = np.where(total >= threshold, total, 0).astype(theta_global.dtype)
        else:
            sent = _topk(total, k)
        return sent, (ledger + delta if keep_total else total - sent).astype(theta_global.dtype)
    return report_with_ledger


def _quorum(weighted=True, include_closed=False, all_tokens_below=False):
    def quorum_mean(reports, tokens, is_open):
        r = np.asarray(reports, dtype=np.float64)
        t = np.asarray(tokens, dtype=np.float64) if weighted else np.ones(len(r))
        mask = np.ones(len(r), bool) if include_closed else np.asarray(is_open, bool)
        w = np.where(mask, t, 0.0)
        return w @ r / (t.sum() if all_tokens_below else w.sum())
    return quorum_mean


WRONG = {
    "08.1": {"the sign flipped (head office moves away)": _outer(sign=+1),
             "heavy-ball momentum, no Nesterov look-ahead": _outer(nesterov=False),
             "the look-ahead uses last week's buffer": _outer(fresh_buffer=False),
             "the learning rate folded into the buffer": _outer(lr_inside=True)},
    "08.2": {"H forgotten: one report per step": _bytes(forget_h=True),
             "bits counted as bytes": _bytes(bits_as_bytes=True),
             "positions counted for a dense report": _bytes(index_always=True),
             "multiplied by H instead of divided": _bytes(h_times=True)},
    "08.3": {"the pseudo-gradient's sign flipped": _report(flip=True),
             "the ledger never added in": _report(no_ledger_in=True),
             "what was sent stays in the ledger": _report(keep_total=True),
             "the largest values, not the largest magnitudes": _report(by_value=True)},
    "08.4": {"a plain mean, tokens ignored": _quorum(weighted=False),
             "closed branches' reports averaged in": _quorum(include_closed=True),
             "divided by every branch's tokens": _quorum(all_tokens_below=True)},
}


@pytest.fixture(scope="module")
def chapter():
    return prepared("08_local_steps", seed=5)


def _failures(task, fn):
    out = []
    for case, want in zip(task.cases, task.expected):
        try:
            got = fn(*case.args, **case.kwargs)
        except Exception as e:     # a wrong answer may also crash on some case
            out.append(f"{case.label}: {type(e).__name__}")
            continue
        why = task.task.compare(want, got, case.args)
        if why is not None:
            out.append(f"{case.label}: {why}")
    return out


def test_the_masters_answers_pass_every_case(chapter):
    from _grade_helpers import reference
    ref = reference("08_local_steps")
    for t in chapter.tasks:
        assert len(t.cases) > t.public, f"{t.task.id} has no hidden cases"
        assert _failures(t, ref[t.task.function]) == [], t.task.id


@pytest.mark.parametrize("task_id,name", [(t, n) for t, wrong in WRONG.items() for n in wrong])
def test_a_plausible_wrong_answer_fails_the_public_cases(chapter, task_id, name):
    assert len(WRONG[task_id]) >= 3
    t = next(t for t in chapter.tasks if t.task.id == task_id)
    public = type(t)(t.task, t.cases[:t.public], t.public, t.expected[:t.public], t.encoded[:t.public])
    assert _failures(public, WRONG[task_id][name]), f"{task_id}: '{name}' passes every public case"
