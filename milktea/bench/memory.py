"""python -m milktea.bench memory: extra peak memory per rank of each scheme, over plain DDP.

Each figure is the training script a user would write (`milktea.bench.memory_script`:
an MLP 64 -> `--hidden` -> 10, 337000 giving 25.3M parameters, 101 MB of float32;
`DDP(net)` with its default options; SGD with momentum 0.9; a random batch of 32; the
first `--steps` steps, 3), run under `torchrun --standalone` on 2 ranks by default, with
the scheme's hook or none: each rank's peak resident set since it started (VmHWM; on a
GPU, torch's peak allocation), the rank that needs the most, the median of `--repeat`
launches. What a scheme costs is its peak minus plain DDP's, as a multiple of the
model's size.

milktea's compiled kernels (numba, loaded at a compressor's first large tensor) cost a
fixed amount per process whatever the model: the row "milktea's kernels" is plain DDP
that loads the measured schemes' kernels before its steps, over plain DDP (on Linux
about 130-140 MB, two thirds of it shared-library pages that the ranks of one machine
share). Each milktea scheme's figure is over that run, the scheme's own cost; the column
"with kernels" is over plain DDP, what the user's script shows.

Two allocator settings. "glibc default" is what an unconfigured process shows, and the
targets are checked there. glibc's malloc raises its mmap threshold each time a large
block is freed (up to 32 MB), after which blocks of that size come from heaps it keeps:
a hook that allocated and freed large temporaries every step would show them here.
"release" starts every rank with MALLOC_MMAP_THRESHOLD_=131072, which pins the threshold
so that freed blocks go back to the system.

`--torch-ops` runs every rank with MILKTEA_NUMBA=0: the codecs' torch ops, a step of
them at a time, and no compiled kernels, so no fixed cost (the row is then what loading
milktea and running its torch path once costs).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..tables import text_table

SCHEMES = ("dense", "torch-fp16", "torch-powersgd", "topk", "sign", "int8", "powersgd", "powersgd-batched")
# x model size, at most (batched PowerSGD's ledger is the bucket padded to a square: the same size)
TARGETS = {"topk": 1.3, "sign": 1.3, "int8": 0.6, "powersgd": 1.2, "powersgd-batched": 1.2}
ALLOCATORS = {"glibc default": {}, "release": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
CHECKED = "glibc default"       # the column the targets are checked on
KERNELS = "kernels"             # the row of milktea's compiled kernels (fixed, per process)


class ScriptError(RuntimeError):
    """The measured script failed on some rank."""


def measure_script(scheme: str, hidden: int, steps: int, workers: int, env: dict | None = None) -> list[dict]:
    """Run `milktea.bench.memory_script scheme` under torchrun; each rank's MEMORY record."""
    root = str(Path(__file__).resolve().parents[2])
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    with tempfile.TemporaryDirectory() as where:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={workers}",
               "-m", "milktea.bench.memory_script", scheme, "--hidden", str(hidden), "--steps", str(steps),
               "--record", where]
        p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
        ranks = [json.loads(f.read_text()) for f in sorted(Path(where).glob("rank*.json"))]
    if p.returncode or len(ranks) != workers:
        raise ScriptError(f"{scheme}: torchrun exited with {p.returncode}: {_cause(p.stderr)[:300]}")
    return ranks


def _cause(stderr: str) -> str:
    """The line of torchrun's output that says why: a rank's exception where one raised
    (torchrun's own summary ends in rules of '=')."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip(" =-*")]
    raised = [line for line in lines if re.match(r"\[rank\d+\]: \w+(Error|Exception)\b", line)]
    return (raised or lines or ["no output"])[-1]


def run(schemes_=SCHEMES, hidden: int = 337_000, steps: int = 3, workers: int = 2,
        allocators=tuple(ALLOCATORS), kernels: bool = True, repeat: int = 3, torch_ops: bool = False
        ) -> list[dict]:
    """One row per scheme: extra peak bytes over plain DDP under each allocator setting
    (`over_ddp_x[setting]`, a multiple of the model's size: for milktea's schemes over
    plain DDP with their kernels loaded; `with_kernels_x`: over plain DDP); with
    `kernels`, first a row for milktea's compiled kernels. Each figure is the median of
    `repeat` launches, of the rank that needs the most in each. torch_ops: every rank
    runs with MILKTEA_NUMBA=0 (as where the environment already says so)."""
    torch_ops = torch_ops or os.environ.get("MILKTEA_NUMBA", "1") == "0"
    extra = {"MILKTEA_NUMBA": "0"} if torch_ops else {}
    from milktea.distributed.schemes import MILKTEA, label
    ours = [s for s in schemes_ if s in MILKTEA and MILKTEA[s][1](0.01, 4) is not None]   # they load kernels

    def measure(scheme, setting):
        runs = [max(r["peak_bytes"] for r in measure_script(scheme, hidden, steps, workers, {**ALLOCATORS[setting], **extra}))
                for _ in range(repeat)]
        return statistics.median(runs), runs

    plain = {a: measure("plain", a) for a in allocators}
    base = dict(plain)      # under milktea's schemes: plain DDP with their kernels, once measured
    rows = [{"scheme": "plain DDP", "label": "plain DDP (no hook)", "steps": steps, "repeat": repeat,
             "peak_bytes": {a: plain[a][0] for a in allocators}, "runs": {a: plain[a][1] for a in allocators},
             "over_ddp_x": {a: 0.0 for a in allocators}}]
    names = ((KERNELS,) if kernels and ours else ()) + tuple(schemes_)
    for name in names:
        if name != KERNELS:
            shown = label(name)
        elif not torch_ops:
            shown = "milktea's kernels (once per process)"
        else:
            shown = "milktea loaded, torch ops (once per process)"
        row = {"scheme": name, "label": shown, "target_x": TARGETS.get(name), "peak_bytes": {}, "runs": {},
               "over_ddp_x": {}, "with_kernels_x": {}}
        try:
            for a in allocators:
                peak, runs = measure("kernels:" + ",".join(ours) if name == KERNELS else name, a)
                if name == KERNELS:
                    base[a] = (peak, runs)
                row["peak_bytes"][a], row["runs"][a] = peak, runs
                under = base[a][0] if name in ours else plain[a][0]
                row["over_ddp_x"][a] = (peak - under) / _model_bytes(hidden)
                row["with_kernels_x"][a] = (peak - plain[a][0]) / _model_bytes(hidden)
        except (ScriptError, subprocess.TimeoutExpired) as e:   # one scheme failing does not hide the others
            row["error"] = str(e).splitlines()[0]
        rows.append(row)
    for r in rows:
        r["model_bytes"] = _model_bytes(hidden)
    return rows


def _model_bytes(hidden: int) -> int:
    """float32 bytes of the MLP 64 -> hidden -> 10."""
    return 4 * (64 * hidden + hidden + hidden * 10 + 10)


def table(rows: list[dict], workers: int) -> str:
    """`run`'s rows as text: each allocator setting's figure, the target and whether it holds."""
    model_mb = rows[0]["model_bytes"] / 1e6
    allocators = list(rows[0]["over_ddp_x"])
    check = CHECKED if CHECKED in allocators else allocators[0]
    shown = []
    for r in rows:
        t = r.get("target_x")
        row = {"scheme": r["label"], "target": t, **r["over_ddp_x"]}
        if check in r.get("with_kernels_x", {}) and r["scheme"] != KERNELS:
            row["with kernels"] = r["with_kernels_x"][check]
        if "error" in r:
            row["error"] = f"not measured: {r['error'][:80]}"
        elif t is not None:
            row["verdict"] = "ok" if r["over_ddp_x"][check] <= t else "MISSED"
        shown.append(row)
    cols = [*allocators, "with kernels"]
    formats = {c: "{:.2f}x" for c in cols} | {"target": "<= {:g}x"}
    return (f"extra peak memory per rank over plain DDP (x the model's {model_mb:.1f} MB of float32), {workers} ranks, "
            f"the rank that needs the most (median of {rows[0].get('repeat', 1)} launches), first "
            f"{rows[0].get('steps', 3)} steps; milktea's schemes over plain DDP with their kernels loaded "
            f"(\"with kernels\": over plain DDP, {check}); targets checked on \"{check}\"\n"
            + text_table(shown, ["scheme", *cols, "target", "verdict"], formats, right=[*cols, "target"],
                         note="error"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench memory", description=__doc__.split("\n")[0])
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--hidden", type=int, default=337_000,
                    help="MLP width (337000: ~25M parameters; a small model measures mostly fixed overheads)")
    ap.add_argument("--steps", type=int, default=3, help="training steps measured (a user's first ones)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS),
                    help=f"comma-separated, from: {', '.join(ALLOCATORS)}")
    ap.add_argument("--repeat", type=int, default=3, help="launches per figure, of which the median is shown")
    ap.add_argument("--no-kernels", action="store_true", help="skip the row of milktea's compiled kernels")
    ap.add_argument("--torch-ops", action="store_true",
                    help="run every rank with MILKTEA_NUMBA=0: torch's ops, never the compiled kernels "
                         "(no fixed cost; slower codecs)")
    ap.add_argument("--out", default="results/bench_memory.json")
    a = ap.parse_args(argv)
    allocators = tuple(x for x in a.allocators.split(",") if x)
    unknown = [x for x in allocators if x not in ALLOCATORS]
    if unknown or not allocators:
        ap.error(f"--allocators: choose from {', '.join(ALLOCATORS)}, got {a.allocators!r}")
    rows = run(tuple(s for s in a.schemes.split(",") if s), a.hidden, a.steps, a.workers, allocators,
               kernels=not a.no_kernels, repeat=max(1, a.repeat), torch_ops=a.torch_ops)
    print(table(rows, a.workers))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0
