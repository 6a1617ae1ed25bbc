"""`python -m milktea.local --ft`: local steps on torchft, from the shell.

    python -m milktea.local --ft --groups 3 --task gpt --inner-steps 20 --steps 600 --bits 8 --kill 2:5:10

starts a lighthouse and 3 replica groups (one process each), kills group 2 halfway
through outer step 5 and restarts it 10 s later, prints what each group did and writes
the quorum log to OUT/quorum.json (--out, default a new folder under results/ft). Ctrl-C or SIGTERM stops
every process it started. On several machines, start a lighthouse once
(torchft_lighthouse --min_replicas 1) and on each machine one group:

    python -m milktea.local --ft --groups 3 --group-id 1 --lighthouse HOST:29510 --host THIS_HOST ...
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("fault tolerance (torchft, with --ft)")
    g.add_argument("--ft", action="store_true", help="run replica groups on torchft: a lighthouse, quorums, recovery")
    g.add_argument("--groups", type=int, default=3, help="replica groups of the run (default 3)")
    g.add_argument("--group-id", type=int, default=None, metavar="G",
                   help="run only group G, against --lighthouse (one group per machine)")
    g.add_argument("--lighthouse", default=None, metavar="HOST:PORT", help="a running lighthouse (default: start one)")
    g.add_argument("--kill", action="append", default=[], metavar="G:STEP[:RESTART_S]",
                   help="SIGKILL group G halfway through outer step STEP, restart it RESTART_S seconds later")
    g.add_argument("--out", default=None, metavar="DIR",
                   help="logs, quorum.json and result.json (default: a new folder under results/ft)")
    g.add_argument("--heartbeat-ms", type=int, default=1000, help="a group is dead after this long unheard")
    g.add_argument("--join-ms", type=int, default=5000, help="the lighthouse's wait for stragglers")
    g.add_argument("--pace", type=float, default=0.0, metavar="SECONDS", help="the least time an inner step takes")
    g.add_argument("--host", default="127.0.0.1", help="this machine's address for the other groups")


def parse_kill(text: str):
    from .config import Kill
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        return Kill(int(parts[0]), int(parts[1]), float(parts[2]) if len(parts) == 3 else None)
    except ValueError:
        raise ValueError(f"--kill {text!r}: write GROUP:OUTER_STEP or GROUP:OUTER_STEP:RESTART_SECONDS, "
                         f"e.g. --kill 2:5:10") from None


def settings(a, ap):
    """The FTConfig and faults from the arguments (argparse's error on a bad one)."""
    from .config import FTConfig
    if a.link is not None or a.checkpoint or a.resume or a.workers is not None:
        ap.error("--ft runs replica groups under a lighthouse: --workers, --link, --checkpoint and --resume "
                 "do not apply (a group that fails recovers from a live peer)")
    try:
        ft = FTConfig(heartbeat_ms=a.heartbeat_ms, join_ms=a.join_ms, pace_s=a.pace, host=a.host)
        return ft, [parse_kill(k) for k in a.kill]
    except (TypeError, ValueError) as e:
        ap.error(str(e))


def _stop_on_signals() -> tuple[dict, dict]:
    """Ctrl-C and SIGTERM only note the signal; the main loop sees it and stops the run.
    (A KeyboardInterrupt raised inside Thread.join can leave the thread's state wrong in
    Python 3.11, and a later join then never returns.) Returns (what was seen, the handlers
    before)."""
    seen: dict = {}

    def handler(signum, frame):
        seen.setdefault("signal", signum)
    return seen, {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}


def main(a, ap, scheme, cfg) -> None:
    from .engine import require
    from .launch import FTError, FTJob
    from .lighthouse import LighthouseUnreachable
    ft, kills = settings(a, ap)
    if a.out is None:
        a.out = os.path.join("results", "ft", time.strftime("run-%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    try:
        require()
        if a.group_id is not None:
            return _one_group(a, ap, scheme, cfg, ft, kills)
        job = FTJob(scheme, cfg, groups=a.groups, ft=ft, faults=kills, folder=os.path.abspath(a.out),
                    lighthouse=a.lighthouse, timeout=a.timeout)
    except (ImportError, LighthouseUnreachable, TypeError, ValueError) as e:
        ap.error(str(e))
    seen, before = _stop_on_signals()
    code = 0
    try:
        job.start()
        print(f"{scheme.label}: {len(job.ids)} replica groups on torchft; logs in {job.folder}", flush=True)
        while not job.done() and "signal" not in seen:
            time.sleep(0.1)
        if "signal" in seen:
            job.stop()
            sig = seen["signal"]
            print(f"stopped ({'Ctrl-C' if sig == signal.SIGINT else f'signal {sig}'}): every process of the "
                  "run has ended", file=sys.stderr)
            code = 130 if sig == signal.SIGINT else 143
        else:
            res = job.wait()
    except (FTError, TimeoutError) as e:
        job.stop()
        print(e, file=sys.stderr)
        code = 1
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    if code:
        raise SystemExit(code)
    _print(res)


def _one_group(a, ap, scheme, cfg, ft, kills):
    from .launch import check_run
    from .group import train_group
    from .lighthouse import address
    if a.lighthouse is None or kills:
        ap.error("--group-id runs one group against a running lighthouse: give --lighthouse HOST:PORT (and no --kill)")
    if not 0 <= a.group_id < a.groups:
        ap.error(f"--group-id {a.group_id}: groups are numbered 0 .. {a.groups - 1} (--groups {a.groups})")
    check_run(scheme, cfg)
    os.makedirs(a.out, exist_ok=True)
    spec = {"scheme": scheme, "run": cfg, "ft": ft, "groups": a.groups, "lighthouse": address(a.lighthouse),
            "folder": os.path.abspath(a.out)}
    from .lighthouse import status
    status(spec["lighthouse"])           # LighthouseUnreachable before anything starts
    final = train_group(spec, a.group_id, 0)   # a group id already running: ValueError, before it trains
    if final is None:
        print(f"group {a.group_id}: the run ended before this group rejoined")
    else:
        print(f"group {a.group_id}: held-out loss {final['loss']:.4f}")


def _print(res) -> None:
    from ...tables import markdown_table
    print(markdown_table(res_rows(res)))
    for k in res.kills:
        print(f"group {k['group']} killed at {k['killed']:.1f} s (outer step {k['at_step']}): "
              + (f"the others went on with a smaller quorum {k['shrink_s']:.1f} s later; " if k["shrink_s"] is not None
                 else "")
              + (f"restarted at {k['restarted']:.1f} s, rejoined at {k['rejoined']:.1f} s (outer step "
                 f"{k['rejoined_step']}): {k['recovery_s']:.1f} s from kill to rejoined" if k["rejoined"] is not None
                 else "it did not rejoin before the run ended"))
    print(f"held-out loss {res.final.get('loss', float('nan')):.4f}; the groups' final parameters differ by at most "
          f"{res.agree:.3g}; quorum log: {os.path.join(res.folder, 'quorum.json')}; processes left: {len(res.left_behind)}")


def res_rows(res) -> list[dict]:
    rows = []
    for g in res.groups:
        rows.append({"group": g["group"], "incarnations": g["incarnations"], "outer steps": g["outer steps"],
                     "quorum sizes": ", ".join(map(str, g["quorum sizes"])), "kB sent": round(g["bytes sent"] / 1e3, 1),
                     "kB received": round(g["bytes received"] / 1e3, 1),
                     "final loss": None if g["final"] is None else round(g["final"]["loss"], 4)})
    return rows
