"""Local steps through a real failure: 3 replica groups of the character GPT on torchft, with
int8 and with Top-K + error feedback (SparseLoCo's report) pseudo-gradients; in each, group
2 killed with SIGKILL halfway through outer step 5 and restarted 10 s later, against the same
run without a fault.

    python -m milktea.bench ft [--steps 1200] [--json results/bench_ft.json]

Prints, per run and group: the outer steps whose report was heard, the quorum sizes it
saw, its recovery (kill to rejoined), the bytes it sent and received, its final held-out
loss; then the targets: final loss within 2% of the fault-free run, recovery at most
30 s, no process left. Every run starts its own lighthouse and processes and ends them.

What scales: each group trains `--steps` inner steps of the GPT (246k parameters, about
20 ms of one core each); the runs take turns, and three groups share this machine's cores,
so a 2-core machine needs several minutes. The recovery time includes loading torch in
the new process, so it is longer on a busy machine.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from ..experiments import local as lx
from ..i18n import _
from ..experiments import local_ft as fx
from ..tables import markdown_table
from . import finish

H = 20


def runs() -> dict:
    return {"int8": lx.diloco(H, lx.int8()), "top2% 2-bit + ledger": lx.sparseloco(H)}


def run(steps: int = 1200, kill_step: int = 5, restart_after: float = 10.0, batch: int = 8, seed: int = 0,
        folder: str | None = None) -> dict:
    from ..local.dist import RunConfig
    from ..local.ft import FTConfig, Kill
    from ..local.ft import run as ft_run
    folder = folder or os.path.join("results", "bench_ft", time.strftime("%Y%m%d-%H%M%S"))
    cfg = RunConfig(task="gpt", steps=steps, batch=batch, seed=seed)
    ft = FTConfig(heartbeat_ms=1000, join_ms=5000, timeout_s=30.0)
    t0, rows, targets, results = time.perf_counter(), [], [], {}
    for name, scheme in runs().items():
        clean = ft_run(scheme, cfg, groups=3, ft=ft, folder=os.path.join(folder, name.replace(" ", "_") + "-clean"))
        hurt = ft_run(scheme, cfg, groups=3, ft=ft, faults=[Kill(2, kill_step, restart_after)],
                      folder=os.path.join(folder, name.replace(" ", "_") + "-kill"))
        results[name] = {"clean": clean, "kill": hurt}
        for label, res in (("no fault", clean), (f"group 2 killed at outer step {kill_step}", hurt)):
            k = res.kills[0] if res.kills else None
            for g in res.groups:
                rows.append({"run": f"{name}, {label}", "group": g["group"], "processes": g["incarnations"],
                             "outer steps heard": g["outer steps"],
                             "quorum sizes": ", ".join(map(str, g["quorum sizes"])),
                             "recovery s": round(k["recovery_s"], 1) if k and k["group"] == g["group"]
                             and k["recovery_s"] is not None else "",
                             "kB sent": round(g["bytes sent"] / 1e3, 1), "kB received": round(g["bytes received"] / 1e3, 1),
                             "final loss": None if g["final"] is None else round(g["final"]["loss"], 4),
                             "vs no fault": "" if g["final"] is None or res is clean else
                             f"{g['final']['loss'] / clean.final['loss'] - 1:+.2%}"})
        targets += [fx.check_loss(hurt, clean, 0.02), fx.check_recovery(hurt, 30.0),
                    fx.check_left(clean, _("no fault")), fx.check_left(hurt, _("group 2 killed"))]
    timeline = {name: r["kill"].kills for name, r in results.items()}
    return dict(torch=torch.__version__, cores=os.cpu_count(), steps=steps, H=H, batch=batch, seed=seed,
                wall_s=time.perf_counter() - t0, folder=folder, rows=rows, table=markdown_table(rows),
                timeline=timeline, targets=[{"text": t.text, "ok": t.ok} for t in targets],
                quorum_logs={name: r["kill"].quorum_log for name, r in results.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench ft", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1200, help=f"inner steps per group, a multiple of H = {H}")
    ap.add_argument("--kill-step", type=int, default=5, help="the outer step group 2 is killed in")
    ap.add_argument("--restart-after", type=float, default=10.0, help="seconds from the kill to the restart")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json", default=os.path.join("results", "bench_ft.json"))
    a = ap.parse_args(argv)
    if a.steps % H:
        ap.error(f"--steps must be a multiple of H = {H}")
    res = run(a.steps, a.kill_step, a.restart_after, a.batch)
    print(f"torch {res['torch']}, {res['cores']} cores; 3 replica groups of the character GPT on torchft, "
          f"H = {H}, {res['steps']} inner steps each; runs and logs in {res['folder']}\n")
    print(res["table"] + "\n")
    for name, kills in res["timeline"].items():
        for k in kills:
            print(f"{name}: group {k['group']} killed at {k['killed']:.1f} s (inner step {k['at_inner_step']}); "
                  + (f"smaller quorum {k['shrink_s']:.1f} s later; " if k["shrink_s"] is not None else "")
                  + (f"restarted at {k['restarted']:.1f} s; " if k["restarted"] is not None else "")
                  + (f"rejoined at {k['rejoined']:.1f} s (outer step {k['rejoined_step']})" if k["rejoined"] is not None
                     else "never rejoined"))
    print()
    finish(res, None, res["targets"])
    print(f"\n{res['wall_s']:.0f} s in all")
    return finish(res, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
