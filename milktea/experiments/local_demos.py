"""Chapter 08's smaller experiments on the digits MLP (a second each): streaming fragments,
the compressed report with and without its ledger, a branch that goes dark, and the two
myths (local steps as gradient accumulation; more inner steps as always cheaper).

    >>> from milktea import Digits
    >>> rows = ledger(Digits(), steps=40)
    >>> [r["scheme"] for r in rows]
    ['top2% 2-bit, with the ledger', 'top2% 2-bit, no ledger']
"""
from __future__ import annotations

from ..compressors import Chain, Quantize, TopK
from ..i18n import N_, _
from ..tables import joined
from ..local import AdamW, DataParallel, DiLoCo, OuterSGD, Outage, simulate
from . import verdicts

LR = 3e-3
COLUMNS = (N_("scheme"), N_("outer steps"), N_("kB per worker"), N_("peak kB per exchange"), N_("test accuracy"),
           N_("test loss"), N_("seed range"), N_("val accuracy"), N_("val loss"), N_("optimizer steps"))


def table(rows: list[dict]) -> list[dict]:
    """The rows as a table: the columns above that the rows have, headers in the reader's language."""
    return [{_(k): r[k] for k in COLUMNS if k in r} for r in rows]


def _row(name: str, h, **extra) -> dict:
    per_worker = [sum(b[w] for b in h.bytes_sent) for w in range(h.workers)]
    peak = max(max(b) for b in h.bytes_sent)
    split = "val" if "perplexity" in h.evals else "test"     # the GPT's held-out text is its validation set
    return {"scheme": name, "outer steps": h.outer_steps, "kB per worker": sum(per_worker) / h.workers / 1e3,
            "peak kB per exchange": peak / 1e3, f"{split} accuracy": h.final("accuracy"),
            f"{split} loss": h.final("loss"), "loss": h.final("loss"), "history": h, **extra}


def streaming(task, *, workers: int = 4, steps: int = 400, inner_steps: int = 20, fragments: int = 4,
              overlap: int = 2, batch: int = 16, seed: int = 0, start=None) -> list[dict]:
    """Plain DiLoCo against Streaming DiLoCo (P fragments in turn, tau steps of overlap),
    both with 4-bit reports: about the same bytes, a peak about P times smaller (fragments
    are whole tensors, so they are only as even as the model's tensors allow)."""
    q = Quantize(bits=4, chunk=None)
    runs = {_("all at once (P = 1)"): DiLoCo(inner_steps, AdamW(lr=LR), compressor=q),
            _("{P} fragments, τ = {tau}").format(P=fragments, tau=overlap):
                DiLoCo(inner_steps, AdamW(lr=LR), compressor=q, fragments=fragments, overlap=overlap)}
    return [_row(name, simulate(task, s, workers=workers, steps=steps, batch=batch, seed=seed, start=start))
            for name, s in runs.items()]


def streaming_sentence(rows: list[dict]) -> str:
    whole, stream = rows
    return _("{a:.0f} kB and {b:.0f} kB per worker in all (each fragment's packet has its own header); the largest single exchange falls from {p:.0f} kB to {q:.0f} kB, {r:.1f}x smaller. Held-out loss with fragments: {said}.").format(
        a=whole["kB per worker"], b=stream["kB per worker"], p=whole["peak kB per exchange"],
        q=stream["peak kB per exchange"], r=whole["peak kB per exchange"] / stream["peak kB per exchange"],
        said=verdicts.relative(stream["loss"], whole["loss"], whole["scheme"]))


def sparse_report(ratio: float = 0.02, bits: int = 2) -> Chain:
    return Chain(TopK(ratio=ratio), Quantize(bits=bits, chunk=None))


def ledger(task, *, workers: int = 4, steps: int = 400, inner_steps: int = 10, batch: int = 16,
           seed: int = 0) -> list[dict]:
    """SparseLoCo's report (Top-2% of the pseudo-gradient, 2-bit values) with each worker's
    ledger and without it; head office averages (outer SGD lr 1, no momentum)."""
    rows = []
    for name, fb in ((_("top2% 2-bit, with the ledger"), True), (_("top2% 2-bit, no ledger"), False)):
        s = DiLoCo(inner_steps, AdamW(lr=LR), outer=OuterSGD(1.0, 0.0), compressor=sparse_report(),
                   error_feedback=fb)
        rows.append(_row(name, simulate(task, s, workers=workers, steps=steps, batch=batch, seed=seed)))
    return rows


def ledger_sentence(rows: list[dict]) -> str:
    with_it, without = rows
    return _("The ledger {effect} on test accuracy ({a:.1%} with it, {b:.1%} without), with {ka:.2f} and {kb:.2f} kB per worker.").format(
        effect=verdicts.effect(with_it["test accuracy"], without["test accuracy"], noise=0.005),
        a=with_it["test accuracy"], b=without["test accuracy"], ka=with_it["kB per worker"],
        kb=without["kB per worker"])


def outage(task, *, workers: int = 4, steps: int = 400, inner_steps: int = 20, closed=(3, 8), batch: int = 16,
           seed: int = 0) -> dict:
    """The same DiLoCo run twice: with every worker open, and with the last worker closed
    for outer steps closed[0] .. closed[1] - 1 (counted from 0; shown counted from 1).
    Returns both rows and who was heard."""
    scheme = DiLoCo(inner_steps, AdamW(lr=LR))
    down = Outage(workers - 1, *closed)
    full = simulate(task, scheme, workers=workers, steps=steps, batch=batch, seed=seed)
    dark = simulate(task, scheme, workers=workers, steps=steps, batch=batch, seed=seed, outages=[down])
    heard: list = []                 # consecutive outer steps (counted from 1) with the same quorum
    for t, _f, ws in dark.quorum:
        who = joined(map(str, ws))
        if heard and heard[-1][1] == who:
            heard[-1][0][1] = t // inner_steps
        else:
            heard.append([[t // inner_steps, t // inner_steps], who])
    heard = [{_("outer steps"): f"{a}" if a == b else f"{a}-{b}", _("workers heard"): who} for (a, b), who in heard]
    return {"rows": [_row(_("every branch open"), full),
                     _row(_("branch {w} closed for outer steps {a} to {b}").format(w=down.worker, a=down.start + 1,
                                                                                   b=down.stop), dark)],
            "heard": heard, "recovery kB": dark.recovery_bytes / 1e3, "outage": down}


def outage_sentence(result: dict) -> str:
    full, dark = result["rows"]
    return _("With a branch dark, the final test loss is {said}; the reopened branch copied {kb:.0f} kB from a peer.").format(
        said=verdicts.relative(dark["test loss"], full["test loss"], _("the run without the outage"), limit=0.03),
        kb=result["recovery kB"])


# --- myths ----------------------------------------------------------------------------------
def accumulation_myth(task, *, workers: int = 4, tokens_steps: int = 400, inner_steps: int = 10,
                      batch: int = 16, seed: int = 0) -> list[dict]:
    """Local steps against gradient accumulation at the same tokens and the same bytes: both
    exchange once per `inner_steps` batches, but accumulation takes one optimizer step per
    exchange, DiLoCo H of them on every worker."""
    acc = simulate(task, DataParallel(AdamW(lr=LR)), workers=workers, steps=tokens_steps // inner_steps,
                   batch=batch * inner_steps, seed=seed)
    local = simulate(task, DiLoCo(inner_steps, AdamW(lr=LR)), workers=workers, steps=tokens_steps, batch=batch,
                     seed=seed)
    return [_row(_("accumulation of {H} batches").format(H=inner_steps), acc, **{"optimizer steps": acc.steps}),
            _row(_("local steps, H = {H}").format(H=inner_steps), local, **{"optimizer steps": local.steps})]


def accumulation_sentence(rows: list[dict]) -> str:
    acc, local = rows
    return _("Same tokens, {kb_a:.0f} kB and {kb_l:.0f} kB per worker; local steps took {s_l} optimizer steps to accumulation's {s_a}, and their test loss is {said}.").format(
        kb_a=acc["kB per worker"], kb_l=local["kB per worker"], s_l=local["optimizer steps"],
        s_a=acc["optimizer steps"], said=verdicts.relative(local["test loss"], acc["test loss"], _("accumulation")))


def inner_steps_myth(task, inner_steps=(1, 5, 20, 100), *, workers: int = 4, steps: int = 400, batch: int = 16,
                     seeds=range(3)) -> list[dict]:
    """The same tokens with more and more inner steps, each H over several seeds: bytes fall
    as 1/H, the loss does not stay put. Each row: the seeds' mean test loss ("test loss"),
    their range and every seed's loss ("losses")."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    rows = []
    for H in inner_steps:
        runs = [simulate(task, DiLoCo(H, AdamW(lr=LR)), workers=workers, steps=steps, batch=batch, seed=s)
                for s in seeds]
        losses = [h.final("loss") for h in runs]
        row = _row(_("H = {H}").format(H=H), runs[0], H=H, losses=losses)
        row["test loss"] = row["loss"] = sum(losses) / len(losses)
        row["test accuracy"] = sum(h.final("accuracy") for h in runs) / len(runs)
        row["seed range"] = f"{min(losses):.3f}–{max(losses):.3f}"
        rows.append(row)
    return rows


def inner_steps_sentence(rows: list[dict]) -> str:
    """The whole curve in words: the seeds' mean loss at each H, whether it rises, falls or
    neither as H grows, and the largest H against H = 1 within the seeds' paired noise."""
    first, last = rows[0], rows[-1]
    means = [r["test loss"] for r in rows]
    steps = [b - a for a, b in zip(means, means[1:])]
    if all(d >= 0 for d in steps):
        shape = _("it rises with H")
    elif all(d <= 0 for d in steps):
        shape = _("it falls with H")
    else:
        shape = _("it neither rises nor falls steadily with H")
    curve = joined([_("{loss:.3f} at H = {H}").format(loss=m, H=r["H"]) for m, r in zip(means, rows)])
    _d, noise = verdicts.paired(last["losses"], first["losses"])
    said = verdicts.gap(last["test loss"], first["test loss"], _("H = {H}").format(H=first["H"]),
                        noise=noise if noise == noise and noise != float("inf") else 0.0,
                        higher_is_better=False, unit="", scale=1, digits=3)
    return _("From H = {a} to H = {b} the bytes fell {x:.0f}x. The test loss, mean of {n} seeds: {curve}; {shape}. "
             "At H = {b} it is {said} (the seeds' paired spread decides).").format(
        a=first["H"], b=last["H"], x=first["kB per worker"] / last["kB per worker"], n=len(first["losses"]),
        curve=curve, shape=shape, said=said)
