"""Grade a whole class: a folder of submissions in, a grade table and feedback out.

Layout of SUBMISSIONS_DIR (one of both per student):
    <student>/<exercise>.ipynb    e.g. alice/03_topk.ipynb, alice/04_error_feedback.ipynb
    <student>.ipynb               one exercise per student (recognised by its metadata or --chapter)
Written to OUT_DIR, each file atomically:
    grades.csv                    one row per student, one column per task, and the total
    results/<student>.json        Gradescope's results format (score, tests[...]) + our resume key
    feedback/<student>.txt        what each task got and why, in the learner's words
    summary.txt, run.json         mean per task and failures by kind; the seed and isolation of the run
    .resume-key                   the secret that authenticates results/*.json (mode 0600)
Student code runs in a sandbox (isolation.py); where none can be built, grading refuses unless
`trust=True` (--trust-submissions), and the summary and run.json then say the run was not isolated.
A rerun skips every student whose results file carries a valid MAC and the same content hash
(same notebooks, same seed, cases and limits), so an interrupted run resumes without losing or
repeating a grade; a record that fails the check is regraded.
"""
from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import os
import re
import secrets
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from . import isolation
from .check import format_result
from .evaluate import WORDS, failed_all, grade_notebook
from .. import i18n
from ..i18n import _
from .notebook import atomic_write, notebook_language
from . import assignment as assignments_
from .prepare import SetupError, check_hidden_dir, fingerprint, prepare
from .sandbox import Limits
from .submissions import find_submissions as _find

VERSION = "2"
KEY_FILE = ".resume-key"


def safe_name(student: str) -> str:
    safe = re.sub(r"[^\w.@-]", "_", student, flags=re.ASCII).lstrip(".") or "_"
    return safe if safe == student else f"{safe}-{hashlib.sha1(student.encode('utf-8', 'backslashreplace')).hexdigest()[:6]}"


def find_submissions(root: str, known, chapter: str | None = None):
    """{student: Student} (submissions.Student: files by assignment, notes) and notes for the summary."""
    try:
        return _find(root, known, chapter)
    except NotADirectoryError as e:
        raise SetupError(str(e)) from None


def _resume_key(out: str) -> bytes:
    """The secret that signs results/*.json: read once, kept in memory. Children never see it
    (the output folder is not in their world)."""
    path = os.path.join(out, KEY_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            key = bytes.fromhex(f.read(100).decode("ascii").strip())
        if len(key) == 32:
            return key
    except (OSError, ValueError):
        pass
    key = secrets.token_bytes(32)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.hex().encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return key


def _mac(key: bytes, record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "extra_data"}
    body["extra_data"] = {k: v for k, v in record.get("extra_data", {}).items() if k != "mac"}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _trusted(record, key: bytes, want: str) -> bool:
    try:
        extra = record["extra_data"]
        return (extra["key"] == want and isinstance(extra.get("mac"), str)
                and hmac.compare_digest(extra["mac"], _mac(key, record)))
    except (KeyError, TypeError, AttributeError):
        return False


def refusal(box) -> str:
    return (f"student code can't be isolated on this machine: {box.why}. Grade on Linux with bubblewrap "
            f"({isolation.INSTALL}; `python -m milktea doctor` tells whether it works here), or, only if "
            "you trust every submission, pass --trust-submissions: the run is then marked as not isolated")


def grade_class(submissions: str, out: str, solutions: str = "solutions", hidden: str | None = None,
                seed: int | None = None, limits: Limits = Limits(), chapter: str | None = None,
                jobs: int = 1, progress: bool = True, trust: bool = False, box=None) -> dict:
    """Grade every submission; returns {student: record}. See the module docstring.
    `solutions`: the folder of master notebooks (each with its NAME.tests.py); `chapter`: grade
    only this assignment; `box`: the isolation.Sandbox to use (default: isolation.probe())."""
    found_assignments = assignments_.find(solutions, [chapter] if chapter else None)
    hidden_files = check_hidden_dir(hidden, assignments_.names(solutions))
    box = isolation.probe() if box is None else box
    if not box.isolated and not trust:
        raise SetupError(refusal(box))
    try:
        isolation.check_hidden_from([solutions, hidden, out, submissions], box)
    except ValueError as e:
        raise SetupError(str(e)) from None
    for sub in ("results", "feedback", "."):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for name in os.listdir(os.path.join(out, sub)):   # left by a run killed mid-write
            if re.search(r"\.tmp\d+$", name):
                os.remove(os.path.join(out, sub, name))
    secret = _resume_key(out)
    run_file = os.path.join(out, "run.json")
    if seed is None and os.path.exists(run_file):
        try:
            with open(run_file) as f:
                seed = json.load(f).get("seed")
        except (OSError, ValueError, AttributeError):
            seed = None
    seed = secrets.randbelow(10**9) if not isinstance(seed, int) or isinstance(seed, bool) else seed
    found, notes = find_submissions(submissions, list(found_assignments), chapter)
    chapters = sorted({ch for st in found.values() for ch in st.files if ch} | ({chapter} if chapter else set()))
    for st in found.values():   # a lone <student>.ipynb without metadata: the class's only exercise
        if None in st.files and len(chapters) == 1 and chapters[0] not in st.files:
            st.files[chapters[0]] = st.files.pop(None)
    # every trusted input is read (and hashed) here, before any student code runs
    prepared = {ch: prepare(found_assignments[ch], seed, hidden_files.get(ch)) for ch in chapters}
    isolated = box.isolated
    how = box.describe() if isolated else f"NOT ISOLATED (--trust-submissions): {box.why}"
    atomic_write(run_file, json.dumps({"seed": seed, "version": VERSION, "isolated": isolated, "isolation": how,
                                       "inputs": {k: v for ch in prepared.values() for k, v in ch.inputs.items()}},
                                      indent=1) + "\n")
    sandbox = box if isolated else None
    deny = [os.path.abspath(p) for p in (solutions, hidden, out, submissions) if p]
    config = json.dumps([VERSION, seed, isolated, {c: fingerprint(p) for c, p in prepared.items()}, limits.__dict__])

    records, todo = {}, []
    for name, st in found.items():
        key = hashlib.sha256((config + json.dumps(sorted((c or "", s.digest) for c, s in st.files.items()))
                              + json.dumps(st.notes)).encode()).hexdigest()
        old = _load(os.path.join(out, "results", safe_name(name) + ".json"))
        if old is not None and _trusted(old, secret, key):
            records[name] = old
        else:
            todo.append((name, st, key))

    def work(item):
        name, st, key = item
        with i18n.speaking(_language(st)):  # this thread only: the learner's language, while grading
            return name, key, _grade_student(st)

    def _grade_student(st):
        results = []
        for ch in chapters:
            sub = st.files.get(ch)
            if sub is not None and sub.nb is not None:
                results.append(grade_notebook(sub.shown, prepared[ch], limits, deny, sandbox, sub.nb))
            elif sub is not None:
                results.append(failed_all(prepared[ch], sub.shown, "malformed", sub.error))
            elif None in st.files:
                unknown = st.files[None]
                results.append(failed_all(prepared[ch], unknown.shown, "malformed", unknown.error or _(
                    "{name}: can't tell which exercise this is (no exercise metadata); "
                    "the instructor can pass --assignment").format(name=unknown.shown)))
            else:
                results.append(failed_all(prepared[ch], "", "not_submitted",
                                          _("{name} was not submitted").format(name=f"{ch}.ipynb")))
        if results:
            results[0].notes[:0] = st.notes
        return results

    start, bar = time.monotonic(), _bar(len(todo), progress)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_safely, work, item) for item in todo]
        for (name, _st, key), fut in zip(todo, futures):
            outcome = fut.result()
            if isinstance(outcome, str):   # a fault of the grader, not of the student: retried next run
                records[name] = _error_record(name, prepared, outcome)
            else:
                rec = _record(name, outcome[2], key)
                rec["extra_data"]["seed"] = seed   # the random cases of this grade: rerun with --seed to see them
                rec["extra_data"]["mac"] = _mac(secret, rec)
                records[name] = rec
                atomic_write(os.path.join(out, "results", safe_name(name) + ".json"), json.dumps(rec, indent=1) + "\n")
                atomic_write(os.path.join(out, "feedback", safe_name(name) + ".txt"),
                             _feedback(name, outcome[2], _language(_st)))
            _write_csv(os.path.join(out, "grades.csv"), found, records, prepared)
            bar.update(1)
    bar.close()
    _write_csv(os.path.join(out, "grades.csv"), found, records, prepared)
    text = summary(records, prepared, len(todo), time.monotonic() - start, notes, how)
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
        with open(path, "rb") as f:
            data = json.loads(f.read(8 << 20).decode("utf-8"))
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
    tests = [{"name": f"{p.task.id} {ch.title(p.task.id)}", "score": 0.0, "max_score": p.task.points,
              "visibility": "visible", "status": "failed", "output": "not graded: internal grader error"}
             for ch in prepared.values() for p in ch.tasks]
    return {"score": 0.0, "tests": tests, "output": "grader error", "extra_data": {
        "key": None, "student": student, "kinds": {t["name"].split()[0]: "grader_error" for t in tests},
        "error": message}}


def _language(st) -> str:
    """The feedback's language: that of the student's first readable notebook (its metadata,
    written by make_exercises into exercises/zh/), English when none says otherwise."""
    for sub in st.files.values():
        if sub is not None and sub.nb is not None:
            return notebook_language(sub.shown, sub.nb, by_folder=False)  # a folder is a student here
    return "en"


def _feedback(student: str, results: list, lang: str = "en") -> str:
    with i18n.speaking(lang):
        parts = [_("Feedback for {student}").format(student=student), ""]
        for res in results:
            name = os.path.basename(res.path) or f"{res.chapter}.ipynb"
            parts += [f"{name}: {res.score:g} / {res.points:g}", format_result(res), ""]
        total = sum(r.score for r in results)
        parts.append(_("Total: {total:g} / {points:g} (public and hidden tests)").format(
            total=total, points=sum(r.points for r in results)))
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


def summary(records, prepared, graded, seconds, notes, how: str = "") -> str:
    tasks = [p.task for ch in prepared.values() for p in ch.tasks]
    n = len(records)
    lines = [f"Graded {graded} submission{'s' if graded != 1 else ''} in {seconds:.1f} s "
             f"({n - graded} kept from an earlier run); {n} in the table.",
             f"Isolation: {how}" if how else "", "",
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

