"""How long `import milktea` takes, beside `import torch` alone, in fresh interpreters.

    python tools/import_time.py            # 7 runs of each, medians
    python tools/import_time.py --runs 15

Each statement runs in its own new process (an import is cached after the first time),
alternating between statements so that a busy machine slows them alike. The time is
measured inside the child, around the statement only (interpreter start-up excluded).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from milktea.timing import median  # noqa: E402  (after the path is set)

STATEMENTS = {
    "import torch": "import torch",
    "import milktea": "import milktea",
    "import milktea; milktea.TopK": "import milktea; milktea.TopK",
    "import milktea; milktea.launch": "import milktea; milktea.launch",
}
CHILD = "import time; t0 = time.perf_counter(); {stmt}; print(time.perf_counter() - t0)"


def once(stmt: str) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", CHILD.format(stmt=stmt)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per statement (default 7)")
    args = ap.parse_args(argv)
    once("import torch")  # warm the file cache so the first statement is not penalised
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(args.runs):
        for name, stmt in STATEMENTS.items():
            times[name].append(once(stmt))
    torch_s = median(times["import torch"])
    width = max(map(len, STATEMENTS))
    print(f"{'statement'.ljust(width)}  median s  vs import torch   ({args.runs} runs each)")
    for name, ts in times.items():
        print(f"{name.ljust(width)}  {median(ts):8.3f}  {median(ts) / torch_s:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
