"""python -m milktea.bench grade: seconds to grade one submission of one exercise.

Each row grades a solution notebook end to end, the way the class grader does: read the
notebook, start the limited child process in its sandbox (bubblewrap, when this machine has
one), run every graded cell and every public case, compare in the parent. "torch" rows grade
a Top-K submission written with torch, whose child needs torch. As root, children fork from a
sandboxed zygote that imported numpy and torch once (zygote.py); the "per child" columns time
the same submissions with bubblewrap and a fresh Python started for each child (what a
non-root grader does), side by side in the same run. The last lines time the zygote's own
start (once per class) and `import numpy` / `import torch` alone, in a sandbox and outside.
The target is <= 2 s per submission on 2 cores.

    python -m milktea.bench grade [--repeat 3] [--solutions solutions]
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

from ..grade import isolation
from ..grade.evaluate import grade_notebook
from ..grade.notebook import atomic_write, cell_tasks, notebook_text, read_notebook
from ..grade.prepare import prepare
from ..grade import assignment
from .timing import measure, table

TARGET_S = 2.0
TORCH_TOPK = '''import torch

def topk_threshold(x, k):
    t = torch.as_tensor(x).float().abs().flatten()
    return float(torch.kthvalue(t, t.numel() - k + 1).values)
'''


def _torch_variant(solutions: str, folder: str) -> str:
    nb = copy.deepcopy(read_notebook(os.path.join(solutions, "03_topk.ipynb")))
    for cell in nb["cells"]:
        if "03.1" in cell_tasks(cell):
            cell["source"] = TORCH_TOPK
    path = os.path.join(folder, "03_topk.ipynb")
    atomic_write(path, notebook_text(nb))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench grade", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--solutions", default="solutions")
    args = ap.parse_args(argv)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    t0 = time.perf_counter()
    found = assignment.find(args.solutions)
    CHAPTERS = list(found)
    prepared = {ch: prepare(found[ch], seed=0) for ch in CHAPTERS}
    prep_s = time.perf_counter() - t0
    box = isolation.probe()
    first = "zygote" if box.zygote else "per child" if box.isolated else "no sandbox"
    boxes = {first: box if box.isolated else None}
    if box.zygote:
        boxes["per child"] = dataclasses.replace(box, zygote=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        subs = [(ch, "numpy", os.path.join(args.solutions, ch + ".ipynb")) for ch in CHAPTERS]
        subs.append(("03_topk", "torch", _torch_variant(args.solutions, tmp)))
        for ch, kind, path in subs:
            cases = sum(len(p.cases) for p in prepared[ch].tasks)
            row = {"exercise": ch, "submission": kind, "cases": cases}
            for name, sandbox in boxes.items():
                res = grade_notebook(path, prepared[ch], box=sandbox)   # also starts the zygote once
                assert res.score == res.points, f"{path}: {res.score}/{res.points}"
                med, best = measure(lambda p=path, c=ch, b=sandbox: grade_notebook(p, prepared[c], box=b),
                                    repeat=args.repeat, warmup=0)
                row[f"{name} s"] = f"{med:.2f}"
                row[f"{name} best"] = f"{best:.2f}"
            row["vs target"] = f"{float(row[first + ' s']) / TARGET_S:.2f}"
            rows.append(row)
    starts = []
    if box.zygote:   # what the first submission of a class pays once (not counted above)
        env = {"PATH": os.defpath, "HOME": "/tmp", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        for torch in (False, True):
            t = time.perf_counter()
            isolation.Zygote(box, torch, env, 300).close()
            starts.append(f"{'numpy + torch' if torch else 'numpy'} {time.perf_counter() - t:.2f} s")
    imports = []
    for module in ("numpy", "torch"):   # a child's start-up, with and without its sandbox, side by side
        plain = [sys.executable, "-I", "-c", f"import {module}"]
        times = {}
        for where, argv in (("plain", plain), ("sandbox", isolation.command(plain, box) if box.isolated else None)):
            if argv:
                times[where] = measure(lambda a=argv: subprocess.run(a, check=True, stdin=subprocess.DEVNULL),
                                       repeat=args.repeat, warmup=0)[0]
        ratio = f", sandbox/plain {times['sandbox'] / times['plain']:.2f}" if len(times) == 2 else ""
        imports.append(f"python -c 'import {module}': " + ", ".join(f"{w} {t:.2f} s" for w, t in times.items())
                       + ratio)
    print(f"grading one submission end to end, seconds (median and best of {args.repeat}; {cpus} CPUs available; "
          f"target <= {TARGET_S:g} s in the {first} column)")
    print(f"isolation: {box.describe()}\n")
    cols = ["exercise", "submission", "cases"] + [f"{n} {c}" for n in boxes for c in ("s", "best")] + ["vs target"]
    print(table(rows, cols))
    if starts:
        print("\nonce per class, starting the sandboxed zygote: " + ", ".join(starts))
    print("\n" + "\n".join(imports))
    print(f"\nonce per class: preparing all {len(CHAPTERS)} exercises (reference answers) took {prep_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
