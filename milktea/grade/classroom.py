"""Grade a whole class: a folder of submissions in, a grade table and feedback out.

Layout of SUBMISSIONS_DIR (one of both per student):
    <student>/<exercise>.ipynb    e.g. alice/03_topk.ipynb, alice/04_error_feedback.ipynb
    <student>.ipynb               one exercise per student (recognised by its metadata or --chapter)
Written to OUT_DIR, each file atomically:
    grades.csv                    one row per student, one column per task, and the total
    results/<student>.json        Gradescope's results format (score, tests[...]) + our resume key
    feedback/<student>.txt        what each task got and why, in the learner's words
    summary.txt, run.json         mean per task and failures by kind; the seed of this class run
A rerun skips every student whose results file carries the same content hash (same notebooks,
same seed, cases and limits), so an interrupted run resumes without losing or repeating a grade.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import secrets
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from .check import format_result
from .evaluate import WORDS, failed_all, grade_notebook
from .notebook import NotebookError, atomic_write, chapter_of, read_notebook
from .prepare import SetupError, fingerprint, prepare
from .public import CHAPTERS
from .sandbox import Limits

VERSION = "1"


def safe_name(student: str) -> str:
    safe = re.sub(r"[^\w.@-]", "_", student).lstrip(".") or "_"
    return safe if safe == student else f"{safe}-{hashlib.sha1(student.encode()).hexdigest()[:6]}"


def find_submissions(root: str, chapter: str | None = None):
    """{student: {chapter: path}} and notes about files that were skipped."""
    if not os.path.isdir(root):
        raise SetupError(f"{root} is not a folder of submissions")
    found, notes = {}, []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            files = found.setdefault(entry, {})
            for rel in _notebooks_under(path):   # downloads often nest folders: look inside them
                ch = _chapter(os.path.join(path, rel), chapter)
                name = os.path.basename(rel)
                if ch is None:
                    notes.append(f"{entry}/{rel}: not one of the exercises, ignored")
                elif ch in files and name != ch + ".ipynb":
                    notes.append(f"{entry}/{rel}: a second notebook for {ch}, ignored")
                else:
                    files[ch] = os.path.join(path, rel)
        elif entry.endswith(".ipynb"):
            found.setdefault(entry[:-6], {})[_chapter(path, chapter, by_name=False)] = path
    return found, notes


def _notebooks_under(folder: str) -> list:
    """Relative paths of the .ipynb files in `folder` and below, canonical names first."""
    found = []
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.relpath(os.path.join(dirpath, f), folder) for f in sorted(files)
                  if f.endswith(".ipynb") and not f.startswith(".")]
    return sorted(found, key=lambda rel: (os.path.basename(rel)[:-6] not in CHAPTERS, rel.count(os.sep), rel))


def _chapter(path, forced, by_name=True):
    if forced:
        return forced
    try:
        nb = read_notebook(path)
    except NotebookError:
        nb = None
    return chapter_of(path if by_name else "", nb, CHAPTERS)


def _unknown(path: str) -> str:
    try:
        read_notebook(path)
    except NotebookError as e:
        return str(e)
    return (f"{os.path.basename(path)}: can't tell which exercise this is (no exercise metadata); "
            "the instructor can pass --chapter")


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        h.update(repr(e).encode())
    return h.hexdigest()


def grade_class(submissions: str, out: str, solutions: str = "solutions", hidden: str | None = None,
                seed: int | None = None, limits: Limits = Limits(), chapter: str | None = None,
                jobs: int = 1, progress: bool = True) -> dict:
    """Grade every submission; returns {student: record}. See the module docstring."""
    for sub in ("results", "feedback", "."):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for name in os.listdir(os.path.join(out, sub)):   # left by a run killed mid-write
            if re.search(r"\.tmp\d+$", name):
                os.remove(os.path.join(out, sub, name))
    found, notes = find_submissions(submissions, chapter)
    run_file = os.path.join(out, "run.json")
    if seed is None and os.path.exists(run_file):
        with open(run_file) as f:
            seed = json.load(f).get("seed")
    seed = secrets.randbelow(10**9) if not isinstance(seed, int) else seed
    atomic_write(run_file, json.dumps({"seed": seed, "version": VERSION}) + "\n")
    chapters = sorted({ch for files in found.values() for ch in files if ch} | ({chapter} if chapter else set()))
    for files in found.values():   # a lone <student>.ipynb without metadata: the class's only exercise
        if None in files and len(chapters) == 1 and chapters[0] not in files:
            files[chapters[0]] = files.pop(None)
    prepared = {ch: prepare(ch, solutions, hidden, seed) for ch in chapters}
    deny = [os.path.abspath(p) for p in (solutions, hidden, out, submissions) if p]
    config = json.dumps([VERSION, seed, {c: fingerprint(p) for c, p in prepared.items()}, limits.__dict__])

    records, todo = {}, []
    for student, files in found.items():
        key = hashlib.sha256((config + json.dumps(sorted((c or "", _hash_file(p)) for c, p in files.items())))
                             .encode()).hexdigest()
        old = _load(os.path.join(out, "results", safe_name(student) + ".json"))
        if old and old.get("extra_data", {}).get("key") == key:
            records[student] = old
        else:
            todo.append((student, files, key))

    def work(item):
        student, files, key = item
        results = []
        for ch in chapters:
            if ch in files:
                results.append(grade_notebook(files[ch], prepared[ch], limits, deny))
            elif None in files:
                results.append(failed_all(prepared[ch], files[None], "malformed", _unknown(files[None])))
            else:
                results.append(failed_all(prepared[ch], "", "not_submitted", f"{ch}.ipynb was not submitted"))
        return student, key, results

    start, bar = time.monotonic(), _bar(len(todo), progress)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_safely, work, item) for item in todo]
        for (student, _files, key), fut in zip(todo, futures):
            outcome = fut.result()
            if isinstance(outcome, str):   # a fault of the grader, not of the student: retried next run
                records[student] = _error_record(student, prepared, outcome)
            else:
                records[student] = _record(student, outcome[2], key)
                atomic_write(os.path.join(out, "results", safe_name(student) + ".json"),
                             json.dumps(records[student], indent=1) + "\n")
                atomic_write(os.path.join(out, "feedback", safe_name(student) + ".txt"),
                             _feedback(student, outcome[2]))
            _write_csv(os.path.join(out, "grades.csv"), found, records, prepared)
            bar.update(1)
    bar.close()
    _write_csv(os.path.join(out, "grades.csv"), found, records, prepared)
    text = summary(records, prepared, len(todo), time.monotonic() - start, notes)
    atomic_write(os.path.join(out, "summary.txt"), text)
    if progress:
        print(text)
    return records


def _bar(total, show):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="grading", unit="student", disable=not show or total == 0)


def _safely(fn, item):
    try:
        return fn(item)
    except Exception:
        return traceback.format_exc(limit=5)


def _load(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) and isinstance(data.get("tests"), list) else None
    except (OSError, ValueError):
        return None


def _record(student: str, results: list, key: str) -> dict:
    """Gradescope's results format; extra_data keeps what a rerun needs."""
    tests = []
    for res in results:
        for t in res.tasks:
            tests.append({"name": f"{t.id} {t.title}", "score": t.score, "max_score": t.points,
                          "visibility": "visible", "status": "passed" if not t.kind else "failed",
                          "output": "\n".join(t.lines) or "all checks passed"})
    score = round(sum(t["score"] for t in tests), 2)
    kinds = {t.id: t.kind for res in results for t in res.tasks}
    return {"score": score, "execution_time": round(sum(r.seconds for r in results), 2),
            "output": f"{student}: {score:g} / {sum(t['max_score'] for t in tests):g} points",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
            "extra_data": {"key": key, "student": student, "kinds": kinds,
                           "notes": [n for r in results for n in r.notes]}}


def _error_record(student, prepared, message) -> dict:
    tests = [{"name": f"{p.task.id} {p.task.title}", "score": 0.0, "max_score": p.task.points,
              "visibility": "visible", "status": "failed", "output": "not graded: internal grader error"}
             for ch in prepared.values() for p in ch.tasks]
    return {"score": 0.0, "tests": tests, "output": "grader error", "extra_data": {
        "key": None, "student": student, "kinds": {t["name"].split()[0]: "grader_error" for t in tests},
        "error": message}}


def _feedback(student: str, results: list) -> str:
    parts = [f"Feedback for {student}", ""]
    for res in results:
        name = os.path.basename(res.path) or f"{res.chapter}.ipynb"
        parts += [f"{name}: {res.score:g} / {res.points:g}", format_result(res), ""]
    total = sum(r.score for r in results)
    parts.append(f"Total: {total:g} / {sum(r.points for r in results):g} (public and hidden tests)")
    return "\n".join(parts) + "\n"


def _write_csv(path, found, records, prepared):
    tasks = [p.task for ch in prepared.values() for p in ch.tasks]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student"] + [f"{t.id} ({t.points:g})" for t in tasks] + [f"total ({sum(t.points for t in tasks):g})"])
    for student in sorted(found):
        rec = records.get(student)
        if rec is None:
            continue
        if rec.get("extra_data", {}).get("error"):
            w.writerow([student] + [""] * len(tasks) + ["grader error"])
            continue
        scores = {t["name"].split()[0]: t["score"] for t in rec["tests"]}
        w.writerow([student] + [f"{scores.get(t.id, 0):g}" for t in tasks] + [f"{rec['score']:g}"])
    atomic_write(path, buf.getvalue())


def summary(records, prepared, graded, seconds, notes) -> str:
    tasks = [p.task for ch in prepared.values() for p in ch.tasks]
    n = len(records)
    lines = [f"Graded {graded} submission{'s' if graded != 1 else ''} in {seconds:.1f} s "
             f"({n - graded} kept from an earlier run); {n} in the table.", "",
             f"{'task':<6} {'mean':>6} {'max':>5}  full marks"]
    kinds = Counter()
    for t in tasks:
        scores = [next((x["score"] for x in r["tests"] if x["name"].split()[0] == t.id), 0.0) for r in records.values()]
        full = sum(s >= t.points for s in scores)
        mean = sum(scores) / n if n else 0.0
        lines.append(f"{t.id:<6} {mean:>6.2f} {t.points:>5g}  {full}/{n}")
    for r in records.values():
        kinds.update(k for k in r.get("extra_data", {}).get("kinds", {}).values() if k)
    lines += ["", "failures by kind (tasks): " + (", ".join(f"{WORDS.get(k, k)} {c}" for k, c in kinds.most_common())
                                                   or "none")]
    errors = [s for s, r in records.items() if r.get("extra_data", {}).get("error")]
    if errors:
        lines.append("grader errors (rerun to retry): " + ", ".join(errors))
    lines += [f"note: {x}" for x in notes]
    return "\n".join(lines) + "\n"

