"""The class grader against adversarial submissions: one student per way to fail.

Every student except a few submits 03_topk built from the solution with exactly one task
sabotaged. The whole class is graded once (module fixture); each test then checks that the
sabotaged task scores 0 for the right reason while every other task, and every other
student, keeps full marks, and that the table, the JSON and the feedback are complete.
"""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _grade_helpers import (HIDDEN, ROOT, SOLUTIONS, TORCH_TOPK, code_cell, graded_cell, save, solution,
                            tasks, with_cell)
from milktea.grade import Limits, grade_class
from milktea.grade.notebook import read_notebook

TOPK = [t.id for t in tasks("03_topk")]
EF = [t.id for t in tasks("04_error_feedback")]
POINTS = {t.id: t.points for ch in ("03_topk", "04_error_feedback") for t in tasks(ch)}
LIMITS = Limits(task_seconds=3, submission_seconds=60, memory_mb=1024, wall_factor=2)

# student -> (task sabotaged, new source of its cell, expected failure kind, words in the feedback)
SABOTAGE = {
    "crash": ("03.2", "def topk_sparsify(x, k):\n    raise ValueError('boom')\n", "exception", "ValueError: boom"),
    "syntax": ("03.3", "def topk_pack(x, k)\n    return x\n", "syntax", "SyntaxError"),
    "renamed": ("03.4", "def topk_unpak(indices, values, shape):\n    return values\n", "missing",
                "defines no function named topk_unpack"),
    "loop": ("03.1", "def topk_threshold(x, k):\n    while True:\n        pass\n", "timeout", "did not finish within"),
    "cell_loop": ("03.2", "def topk_sparsify(x, k):\n    return x\n\nwhile True:\n    pass\n", "timeout",
                  "could not run"),
    "sys_exit": ("03.3", "import sys\n\ndef topk_pack(x, k):\n    sys.exit(0)\n", "exit", "sys.exit"),
    "exit_at_load": ("03.4", "raise SystemExit(1)\n\ndef topk_unpack(indices, values, shape):\n    return values\n",
                     "exit", "SystemExit"),
    "os_exit": ("03.1", "import os\n\ndef topk_threshold(x, k):\n    os._exit(0)\n", "crash", "exit code 0"),
    "segfault": ("03.2", "import faulthandler\n\ndef topk_sparsify(x, k):\n    faulthandler._sigsegv()\n", "crash",
                 "segmentation fault"),
    "memory_bomb": ("03.3", "import numpy as np\n\ndef topk_pack(x, k):\n    hoard = []\n    while True:\n"
                            "        hoard.append(np.empty(10**8, np.uint8))\n", "memory", "ran out of memory"),
    "monkeypatch": ("03.1", "import builtins\nimport numpy as np\nimport torch\n\n"
                            "np.allclose = np.array_equal = lambda *a, **k: True\n"
                            "torch.equal = torch.allclose = lambda *a, **k: True\n"
                            "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 0\n\n"
                            "def topk_threshold(x, k):\n    return float(np.abs(x).max()) + 1.0\n", "wrong", "expected"),
    "read_secrets": ("03.2", f"def topk_sparsify(x, k):\n"
                             f"    open({str(SOLUTIONS / '03_topk.ipynb')!r}).read()\n"
                             f"    return open({str(HIDDEN / '03_topk.py')!r}).read()\n", "blocked", "may not read"),
    "write_grades": ("03.3", "import os\n\ndef topk_pack(x, k):\n"
                             "    with open(OUT_CSV, 'w') as f:\n"
                             "        f.write('student,total\\nwrite_grades,999\\n')\n    return x, x\n",
                     "blocked", "may not write"),
    "forge": ("03.4", "import os, sys\n\ndef topk_unpack(indices, values, shape):\n"
                      "    os.write(int(sys.argv[-1]), b'{\"ev\": \"done\"}\\n')\n    return values\n",
              "protocol", "result channel"),
    "kill_parent": ("03.1", "import os\n\ndef topk_threshold(x, k):\n    os.kill(os.getppid(), 0)\n    return 0.0\n",
                    "blocked", "signals"),
    "fork": ("03.2", "import os\n\ndef topk_sparsify(x, k):\n    if os.fork() == 0:\n        while True:\n"
                     "            pass\n    return x\n", "blocked", "os.fork"),
    "bad_output": ("03.3", "def topk_pack(x, k):\n    return object(), object()\n", "bad_output", "can't read"),
    "import_milktea": ("03.4", "def topk_unpack(indices, values, shape):\n    import milktea\n    return values\n",
                       "blocked", "import milktea"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grade_class")
    subs, out = root / "submissions", root / "out"
    topk, ef = solution("03_topk"), solution("04_error_feedback")
    for student, (task, source, _, _) in SABOTAGE.items():
        source = source.replace("OUT_CSV", repr(str(out / "grades.csv")))
        save(with_cell(topk, task, source), subs / student / "03_topk.ipynb")
    save(topk, subs / "alice" / "03_topk.ipynb")
    save(ef, subs / "alice" / "04_error_feedback.ipynb")
    save(read_notebook(str(ROOT / "exercises" / "03_topk.ipynb")), subs / "bob" / "03_topk.ipynb")
    save(ef, subs / "zed" / "04_error_feedback.ipynb")                       # never submitted 03
    save(topk, subs / "single.ipynb")                                         # one file, found by metadata
    save(topk, subs / "nested" / "download" / "03_topk (1).ipynb")             # a renamed copy, one level down
    save(b"this is not a notebook\n", subs / "garbage.ipynb")
    save(json.dumps({"metadata": {"milktea": {"chapter": "03_topk"}}, "cells": []}), subs / "nocells" / "03_topk.ipynb")
    noisy = with_cell(topk, "03.1", graded_cell(topk, "03.1")["source"] + "\nfor _ in range(20):\n"
                                                                              "    print('x' * 100_000)\n")
    noisy["cells"] += [code_cell("while True:\n    pass\n"), code_cell("this is not python(\n"),
                       code_cell("import os\nos._exit(1)\n")]
    save(noisy, subs / "noisy" / "03_topk.ipynb")
    untagged = json.loads(json.dumps(topk))
    for cell in untagged["cells"]:
        cell["metadata"].pop("tags", None)
    save(untagged, subs / "untagged" / "03_topk.ipynb")
    torchy = topk
    for task, source in TORCH_TOPK.items():
        torchy = with_cell(torchy, task, source)
    save(torchy, subs / "torchy" / "03_topk.ipynb")
    start = time.monotonic()
    records = grade_class(str(subs), str(out), str(SOLUTIONS), str(HIDDEN), seed=7, limits=LIMITS,
                          jobs=2, progress=False)
    return {"subs": subs, "out": out, "records": records, "seconds": time.monotonic() - start}


def expected_table():
    full = {t: POINTS[t] for t in TOPK}
    none_ef = {t: 0 for t in EF}
    table = {s: {**full, **none_ef, task: 0} for s, (task, *_) in SABOTAGE.items()}
    table.update({
        "alice": {**full, **{t: POINTS[t] for t in EF}},
        "bob": {**{t: 0 for t in TOPK}, **none_ef},
        "zed": {**{t: 0 for t in TOPK}, **{t: POINTS[t] for t in EF}},
        "single": {**full, **none_ef}, "nested": {**full, **none_ef}, "noisy": {**full, **none_ef},
        "untagged": {**full, **none_ef},
        "torchy": {**full, **none_ef},
        "garbage": {t: 0 for t in POINTS}, "nocells": {t: 0 for t in POINTS},
    })
    return table


def read_csv(path):
    """The table's header (task ids, total, status) and {student: {task: points, "total": points}}."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = [h.split()[0] for h in rows[0]]
    return header, {r[0]: dict(zip(header[1:-1], map(float, r[1:-1]))) for r in rows[1:]}


def test_the_whole_table_is_complete_and_exact(graded):
    header, rows = read_csv(graded["out"] / "grades.csv")
    assert header == ["student"] + TOPK + EF + ["total", "status"]
    table = expected_table()
    assert set(rows) == set(table)
    for student, scores in table.items():
        got = rows[student]
        assert {t: got[t] for t in POINTS} == scores, student
        assert got["total"] == sum(scores.values()), student


def by_task(rec):
    """{task id: {"score", "status", "output"}}: a task's public and hidden entries taken together."""
    out = {}
    for t in rec["tests"]:
        one = out.setdefault(t["name"].split()[0], {"score": 0.0, "status": "passed", "output": ""})
        one["score"] = round(one["score"] + t["score"], 2)
        one["status"] = "failed" if t["status"] == "failed" else one["status"]
        one["output"] += t["output"] + "\n"
    return out


@pytest.mark.parametrize("student", sorted(SABOTAGE))
def test_each_failure_costs_only_its_task(graded, student):
    task, _, kind, words = SABOTAGE[student]
    rec = graded["records"][student]
    tests = by_task(rec)
    assert rec["extra_data"]["kinds"][task] == kind
    assert tests[task]["score"] == 0 and tests[task]["status"] == "failed"
    assert words in tests[task]["output"]
    for other in TOPK:
        if other != task:
            assert tests[other]["score"] == POINTS[other], (other, tests[other]["output"])
    feedback = (graded["out"] / "feedback" / f"{student}.txt").read_text()
    assert words in feedback and f"{task} " in feedback


def test_gradescope_results_format(graded):
    for path in (graded["out"] / "results").glob("*.json"):
        data = json.loads(path.read_text())
        assert set(data) >= {"score", "tests"}
        assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"]))
        for t in data["tests"]:
            assert set(t) >= {"name", "score", "max_score", "visibility", "output"}
            assert 0 <= t["score"] <= t["max_score"]
            assert t["visibility"] == ("after_due_date" if t["name"].endswith("(hidden tests)") else "visible")


def test_reasons_in_words(graded):
    recs = graded["records"]

    def output(student, task):
        return by_task(recs[student])[task]["output"]
    assert "raise NotImplementedError" in output("bob", "03.2")
    assert "not valid JSON" in output("garbage", "03.1")
    assert "no graded cells" in output("nocells", "03.1")
    assert "was not submitted" in output("zed", "03.1")
    assert "untagged" in " ".join(recs["untagged"]["extra_data"]["notes"])
    # wrong answers name the case, the call, what was expected and what came back
    text = output("monkeypatch", "03.1")
    assert "case '" in text and "topk_threshold(x=" in text and "expected" in text and ", got " in text
    assert "hidden checks failed" in text
    # the attack on the grade table was refused, and the table is intact
    assert "write_grades,999" not in (graded["out"] / "grades.csv").read_text()


def test_summary_counts_failures(graded):
    text = (graded["out"] / "summary.txt").read_text()
    assert "03.1" in text and "failures by kind" in text and "too slow / endless loop" in text
    assert f"{len(expected_table())} in the table" in text


def test_rerun_resumes_without_regrading(graded, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded["out"], out)
    before = (out / "grades.csv").read_text()
    # an interrupted run: one student's files never written, a stray temp file, a half-written table
    (out / ".state" / "crash.json").unlink()
    (out / "feedback" / "crash.txt").unlink()
    (out / "results" / "bob.json.tmp123").write_text("{")
    (out / "grades.csv").write_text(before[:40])
    grade_class(str(graded["subs"]), str(out), str(SOLUTIONS), str(HIDDEN), limits=LIMITS, progress=False)
    assert (out / "grades.csv").read_text() == before
    assert (out / "summary.txt").read_text().startswith("Graded 1 submission ")
    assert json.loads((out / "run.json").read_text())["seed"] == 7


def test_a_changed_notebook_is_regraded(graded, tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    shutil.copytree(graded["subs"], subs)
    shutil.copytree(graded["out"], out)
    fixed = solution("03_topk")
    save(fixed, subs / "crash" / "03_topk.ipynb")
    records = grade_class(str(subs), str(out), str(SOLUTIONS), str(HIDDEN), limits=LIMITS, progress=False)
    assert (out / "summary.txt").read_text().startswith("Graded 1 submission ")
    topk_points = sum(POINTS[t] for t in TOPK)
    assert records["crash"]["score"] == topk_points
    _, rows = read_csv(out / "grades.csv")
    assert rows["crash"]["total"] == topk_points and rows["alice"]["total"] == sum(POINTS.values())


def test_killed_grader_resumes_to_the_same_table(graded, tmp_path):
    """Kill the grader process mid-class, rerun: every grade present once, the same as a full run."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    for student in ("alice", "crash", "loop", "bob", "syntax", "forge"):
        shutil.copytree(graded["subs"] / student, subs / student)
    cmd = [sys.executable, "-m", "milktea.grade", str(subs), "--out", str(out), "--solutions", str(SOLUTIONS),
           "--hidden", str(HIDDEN), "--seed", "7", "--task-timeout", "3", "--wall-factor", "2", "--memory-mb", "1024"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "results").glob("*.json"))) < 2 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _, rows = read_csv(out / "grades.csv")
    _, full = read_csv(graded["out"] / "grades.csv")
    assert rows == {s: full[s] for s in rows} and set(rows) == {p.name for p in subs.iterdir()}
    assert not list((out / "results").glob("*.tmp*"))
