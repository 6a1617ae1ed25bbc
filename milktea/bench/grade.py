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
    python -m milktea.bench grade --class 30 [--jobs 1]      # a whole class, every assignment
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ..grade import isolation
from ..grade.classroom import grade_class
from ..grade.evaluate import grade_notebook
from ..grade.notebook import atomic_write, cell_tasks, notebook_text, read_notebook
from ..grade.prepare import prepare
from ..grade import assignment
from .timing import measure, table

TARGET_S = 2.0
CLASS_TARGET_S = 300.0
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


def bench_class(solutions: str, students: int, jobs: int) -> int:
    """A class of `students`, each handing in every assignment's master notebook (one student in
    three with the torch Top-K), graded by the class grader into a fresh folder, timed."""
    found = assignment.find(solutions)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    with tempfile.TemporaryDirectory() as tmp:
        subs = os.path.join(tmp, "subs")
        torchy = _torch_variant(solutions, tmp)
        for i in range(students):
            folder = os.path.join(subs, f"student{i:03d}")
            os.makedirs(folder)
            for name, a in found.items():
                src = torchy if name == "03_topk" and i % 3 == 0 else a.master
                shutil.copy(src, os.path.join(folder, name + ".ipynb"))
        t0 = time.perf_counter()
        grade_class(subs, os.path.join(tmp, "out"), solutions, seed=0, jobs=jobs, progress=False)
        seconds = time.perf_counter() - t0
        with open(os.path.join(tmp, "out", "grades.csv")) as f:
            rows = f.read().splitlines()[1:]
    full = sum(r.split(",")[-2] == f"{sum(a.points for a in found.values()):g}" for r in rows)
    after = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"a class of {students} students x {len(found)} assignments ({students * len(found)} notebooks), "
          f"--jobs {jobs}: {seconds:.1f} s, {seconds / students:.2f} s per student; {full}/{students} full marks")
    print(f"target: under {CLASS_TARGET_S:g} s for 30 x 6 -> {seconds * 30 / students / CLASS_TARGET_S:.2f} of it "
          f"(scaled to 30 students)")
    print(f"load average before {load[0]:.1f}, after {after[0]:.1f} on {os.cpu_count()} CPUs "
          "(a shared machine inflates the time)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.bench grade", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--solutions", default="solutions")
    ap.add_argument("--class", dest="students", type=int, default=0,
                    help="instead: grade a whole class of this many students, every assignment each (target: "
                         f"30 students x 6 chapters in under {CLASS_TARGET_S:g} s)")
    ap.add_argument("--jobs", type=int, default=1, help="with --class: submissions graded at the same time (1)")
    args = ap.parse_args(argv)
    if args.students:
        return bench_class(args.solutions, args.students, args.jobs)
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
