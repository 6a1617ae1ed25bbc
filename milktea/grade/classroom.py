"""Grade a whole class: a folder of submissions in, a grade table and feedback out.

Layout of SUBMISSIONS_DIR (see submissions.py; LMS downloads are understood, see lms.py):
    <student>/<exercise>.ipynb    e.g. alice/03_topk.ipynb (also .py files and .zip uploads)
    <student>.ipynb               one exercise per student (recognised by its metadata or --assignment)
Written to OUT_DIR, each file atomically:
    grades.csv                    one row per student (the roster's, if given), one column per task, the total
    results/<student>.json        Gradescope's results format (public and hidden parts, their visibility)
    feedback/<student>.txt        what each task got and why, in the learner's words and language
    summary.txt, run.json         mean per task and failures by kind; the seed and isolation of the run
    .state/, .resume-key          the signed autograded records (records.py) and their secret
Student code runs in a sandbox (isolation.py); where none can be built, grading refuses unless
`trust=True` (--trust-submissions), and the summary and run.json then say the run was not isolated.
A rerun reuses every record whose signature holds and whose inputs are the same (notebooks,
seed, tests files, limits, the grader's own code), so an interrupted run resumes without losing
or repeating a grade; the outputs are rendered again from the records each time, with the
overrides file and the late policy on top, and a file an earlier run wrote that this one did
not is removed (outdir.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from . import assignment as assignments_
from . import isolation, late, lms, outdir, records, report
from .. import i18n
from ..i18n import _
from .evaluate import failed_all, grade_notebook
from .limits import Limits
from .notebook import atomic_write, notebook_language
from .prepare import SetupError, check_hidden_dir, fingerprint, prepare
from .records import safe_name
from .submissions import Student, find_submissions as _find
from .text import key as text_key, lazy

__all__ = ["grade_class", "find_submissions", "refusal", "safe_name"]


def find_submissions(root: str, known, chapter: str | None = None):
    """{student: Student} (submissions.Student: files by assignment, notes) and notes for the summary."""
    try:
        return _find(root, known, chapter)
    except NotADirectoryError as e:
        raise SetupError(str(e)) from None


def refusal(box) -> str:
    how = "" if isolation.INSTALL in box.why else f" ({isolation.INSTALL})"   # said once, not twice
    return (f"student code can't be isolated on this machine: {box.why}. Grade on Linux with bubblewrap{how}; "
            "`python -m milktea doctor` tells whether it works here. Only if you trust every submission, "
            "pass --trust-submissions: the run is then marked as not isolated")


def _by_roster(found: dict, roster) -> tuple[dict, dict]:
    """Students keyed by roster id where their names (or LMS keys) match one; {id: status}."""
    if roster is None:
        return found, {}
    out, status = {}, {}
    for name, st in found.items():
        sid = roster.find([name] + st.keys)
        if sid is None:
            out[name], status[name] = st, "not on the roster"
            continue
        merged = out.setdefault(sid, Student(sid))
        merged.late = late.merge(merged.late, st.late)
        merged.fault = merged.fault or st.fault
        for ch, sub in st.files.items():
            if ch in merged.files:
                merged.note(lazy("{path}: a second file for {name} (from {student}), ignored", path=sub.shown,
                                 name=ch, student=name))
            else:
                merged.files[ch] = sub
        for n in st.notes:
            merged.note(n)
    return out, status


def _overrides(path, known_students, tasks) -> dict:
    """{student: {task: report.Override}} from the overrides file, checked against the class."""
    if not path:
        return {}
    points = {t.id: t.points for t in tasks}
    out = {}
    for student, task, value, comment in lms.read_overrides(path):
        if student not in known_students:
            raise SetupError(f"--overrides {path}: no student {student!r} in this class")
        if task == "late":   # the late penalty's points for this student, instead of the rule's
            out.setdefault(student, {})[task] = report.Override(value, comment)
            continue
        if task not in points:
            raise SetupError(f"--overrides {path}: no task {task!r} in this run (tasks: {', '.join(points)}; "
                             "or late, for the late penalty)")
        if value is not None and value > points[task] + 1e-9:
            raise SetupError(f"--overrides {path}: {value:g} points for {student}, task {task}: the task is worth "
                             f"{points[task]:g}")
        out.setdefault(student, {})[task] = report.Override(value, comment)
    return out


def _language(st) -> str:
    """The feedback's language: that of the student's first readable notebook (its metadata,
    written by the release into exercises/zh/), English when none says otherwise."""
    for sub in st.files.values():
        if sub is not None and sub.nb is not None:
            return notebook_language(sub.shown, sub.nb, by_folder=False)  # a folder is a student here
    return "en"


def _grade_student(st, chapters, prepared, limits, deny, sandbox) -> list:
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
        results[0].notes[:0] = [str(n) for n in st.notes]   # said now, in the learner's language
    return results


def grade_class(submissions: str, out: str, solutions: str = "solutions", hidden: str | None = None,
                seed: int | None = None, limits: Limits = Limits(), chapter: str | None = None,
                jobs: int = 1, progress: bool = True, trust: bool = False, box=None, roster: str | None = None,
                overrides: str | None = None, stage: str = "after_due_date", late_rule: str | None = None,
                due: str | None = None, submitted: str | None = None) -> dict:
    """Grade every submission; returns {student: results JSON}. See the module docstring.
    `solutions`: the folder of master notebooks (each with its NAME.tests.py); `chapter`: grade
    only this assignment; `roster`: a CSV of the class (absent students get a row); `overrides`:
    a CSV of the instructor's own points per student and task; `stage`: what feedback shows of
    the hidden tests (report.STAGES); `late_rule`, `due`, `submitted`: the late policy (late.py);
    `box`: the isolation.Sandbox (default: isolation.probe()). Nothing is written to `out`
    until every trusted input has been read and every reference answer computed."""
    if stage not in report.STAGES:
        raise SetupError(f"--feedback-stage must be one of {', '.join(report.STAGES)}, not {stage!r}")
    outdir.check(out, {"the submissions folder": submissions, "--solutions": solutions, "--hidden": hidden})
    found_assignments = assignments_.find(solutions, [chapter] if chapter else None)
    hidden_files = check_hidden_dir(hidden, assignments_.names(solutions))
    class_list = lms.Roster.read(roster) if roster else None
    rule = late.Rule.parse(late_rule) if late_rule else None
    times = late.days_late(submitted, due)
    if due:
        late.days_after(due, due, "--due")   # a --due that is not a date is refused before anything runs
    box = isolation.probe() if box is None else box
    if not box.isolated and not trust:
        raise SetupError(refusal(box))
    try:
        isolation.check_hidden_from([solutions, hidden, out, submissions], box)
    except ValueError as e:
        raise SetupError(str(e)) from None
    found, notes = find_submissions(submissions, list(found_assignments), chapter)
    for st in found.values():   # Gradescope's submission times, against --due
        try:
            st.late = late.merge(st.late, late.days_after(st.submitted, due, "submission_metadata.yml"))
        except SetupError:
            st.note(lazy("submission_metadata.yml gives a submission time that is not a date ({when}): "
                         "its lateness is unknown", when=st.submitted[:40]))
    found, status = _by_roster(found, class_list)
    chapters = sorted({ch for st in found.values() for ch in st.files if ch} | ({chapter} if chapter else set()))
    if not chapters and class_list is not None:
        chapters = sorted(found_assignments)
    for st in found.values():   # a lone <student>.ipynb without metadata: the class's only exercise
        if None in st.files and len(chapters) == 1 and chapters[0] not in st.files:
            st.files[chapters[0]] = st.files.pop(None)
    tasks = [t for ch in chapters for t in found_assignments[ch].tasks]
    everyone = list(found) + [sid for sid in (class_list.ids if class_list else []) if sid not in found]
    changes = _overrides(overrides, set(everyone), tasks)
    seed = outdir.seed(out, seed)
    # every trusted input is read (and hashed) here, before any student code runs and before
    # anything is written: a failing reference leaves --out as it was
    prepared = {ch: prepare(found_assignments[ch], seed, hidden_files.get(ch)) for ch in chapters}
    unknown = sorted(set(times) - set(everyone))
    if unknown:
        raise SetupError(f"--submitted {submitted}: no student {unknown[0]!r} in this class")
    outdir.make(out)
    secret = records.resume_key(out)
    isolated = box.isolated
    how = box.describe() if isolated else f"NOT ISOLATED (--trust-submissions): {box.why}"
    atomic_write(os.path.join(out, "run.json"), json.dumps(
        {"seed": seed, "version": records.VERSION, "grader": records.grader_version(), "isolated": isolated,
         "isolation": how, "stage": stage, "late_penalty": str(rule) if rule else None,
         "inputs": {k: v for ch in prepared.values() for k, v in ch.inputs.items()}}, indent=1) + "\n")
    sandbox = box if isolated else None
    deny = [os.path.abspath(p) for p in (solutions, hidden, out, submissions) if p]
    # what a grade depends on, all of it: a change to any regrades (the tests file and hidden
    # tests byte for byte, the masters, the seed, the limits, the grader's own code)
    config = json.dumps([records.VERSION, records.grader_version(), seed, isolated,
                         {c: [fingerprint(p), sorted(p.inputs.values())] for c, p in prepared.items()},
                         limits.__dict__])

    kept, todo, errors = {}, [], {}
    for name, st in found.items():
        if st.fault:   # the grader failed while reading this student's files: retried next run
            errors[name] = st.fault
            continue
        key = hashlib.sha256((config + json.dumps(sorted((c or "", s.digest) for c, s in st.files.items()))
                              + json.dumps([text_key(n) for n in st.notes])).encode()).hexdigest()
        old = records.load(out, name, secret, key)
        if old is not None:
            kept[name] = old
        else:
            todo.append((name, st, key))
    reused = len(kept)

    def work(item):
        name, st, key = item
        lang = _language(st)
        with i18n.speaking(lang):  # this thread only: the learner's language, while grading
            return records.make(name, _grade_student(st, chapters, prepared, limits, deny, sandbox), key, seed,
                                lang, secret)

    start, bar, trouble = time.monotonic(), _bar(len(todo), progress), []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_safely, work, item) for item in todo]
        for (name, _st, _key), fut in zip(todo, futures):
            outcome = fut.result()
            if isinstance(outcome, str):   # a fault of the grader, not of the student: retried next run
                errors[name] = outcome
            else:
                records.save(out, outcome)
                kept[name] = outcome
                trouble += [f"{name}: {t}" for r in outcome["results"] for t in r.get("grader_notes", [])]
            bar.update(1)
    bar.close()
    for sid in everyone:
        if sid not in found:
            kept[sid] = {"student": sid, "absent": True, "seed": seed, "lang": "en",
                         "results": [failed_all(prepared[ch], "", "not_submitted", _("{name} was not submitted")
                                                .format(name=f"{ch}.ipynb")).to_dict() for ch in chapters]}
            status[sid] = "not submitted"
    lateness = {sid: late.merge(found[sid].late if sid in found else None, times.get(sid)) for sid in everyone}
    rendered, written = _render(out, kept, errors, everyone, status, changes, tasks, stage,
                                report.Policy(rule, lateness), class_list)
    removed = outdir.tidy(out, written)
    text = report.summary(rendered, tasks, len(todo) - len(errors), time.monotonic() - start,
                          notes + trouble + [f"removed {r}: written by an earlier run, not by this one" for r in removed],
                          how, errors, reused)
    atomic_write(os.path.join(out, "summary.txt"), text)
    if progress:
        print(text)
    return rendered


def _render(out, kept, errors, everyone, status, changes, tasks, stage, policy, class_list) -> tuple:
    """Write every student's results JSON and feedback, and the table; returns the results and
    the files written (relative to `out`)."""
    rendered, rows, written = {}, [], set()
    for student in sorted(everyone):
        if student in errors:
            rows.append((student, None, "grader error (rerun to retry)"))
            continue
        record, mine = kept[student], changes.get(student, {})
        if not record.get("absent"):
            written.add(f"{records.STATE}/{safe_name(student)}.json")
        rendered[student] = report.results_json(student, record, mine, policy)
        for folder, suffix, text in (("results", ".json", json.dumps(rendered[student], indent=1) + "\n"),
                                     ("feedback", ".txt", report.feedback(student, record, stage, mine, policy))):
            atomic_write(os.path.join(out, folder, safe_name(student) + suffix), text)
            written.add(f"{folder}/{safe_name(student)}{suffix}")
        state = status.get(student, "")
        if any(o.points is not None for o in mine.values()):   # a comment alone changes no score
            state = (state + "; " if state else "") + "adjusted by the instructor"
        if rendered[student]["extra_data"].get("late"):
            state = (state + "; " if state else "") + "late"
        rows.append((student, rendered[student], state))
    atomic_write(os.path.join(out, "grades.csv"), report.csv_text(rows, tasks, class_list))
    return rendered, written


def _bar(total, show):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="grading", unit="student", disable=not show or total == 0)


def _safely(fn, item):
    try:
        return fn(item)
    except Exception:
        return traceback.format_exc(limit=5)
