"""A class run where no student code has to run, in process: every refusal path ends in a note
on that one student and a graded class; the output folder holds exactly the files of this run;
the key of a saved grade covers the whole tests file; every word of the outputs is true (hidden
entries, overrides, CSV cells, roster columns, the late policy); the Gradescope bundle keeps the
instructor's files and its seed. A sandbox is named but never started: no notebook here is
gradable, so no child is needed (a graded class with honest students is
tests/integration/test_grade_instructor.py)."""
import csv
import functools
import io
import json
import os
import shutil
import stat
import zipfile

import pytest

from milktea import i18n
from milktea.grade import classroom, gradescope, submissions
from milktea.grade.assignment import SetupError
from milktea.grade.isolation import Sandbox

BOX = Sandbox("bwrap", "/usr/bin/bwrap")   # never started: nothing here reaches a child
MASTER = {"cells": [
    {"cell_type": "markdown", "metadata": {}, "source": "## Task hw.1 · Double (2 points)\n"},
    {"cell_type": "code", "metadata": {"tags": ["graded", "task:hw.1"]}, "outputs": [], "execution_count": None,
     "source": "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n"},
    {"cell_type": "markdown", "metadata": {}, "source": "## Task hw.2 · Word (1 point)\n"},
    {"cell_type": "code", "metadata": {"tags": ["graded", "task:hw.2"]}, "outputs": [], "execution_count": None,
     "source": "def word(n):\n    ### BEGIN SOLUTION\n    return 'tea' * n\n    ### END SOLUTION\n"}],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
TESTS = """from milktea.grade.spec import Case, Task, number

def _same(expected, got, args):
    return None if got == expected else "not the word"

TASKS = [Task("hw.1", "double", 2, lambda rng, ref: [Case("one", (1,)), Case("two", (2.5,))], number()),
         Task("hw.2", "word", 1, lambda rng, ref: [Case("one", (1,))], _same, reveal=False)]

### BEGIN HIDDEN TESTS
HIDDEN = {"hw.1": [Case("big", (1e6,))]}
### END HIDDEN TESTS
"""


def course(tmp_path, tests=TESTS):
    hw = tmp_path / "hw"
    hw.mkdir(exist_ok=True)
    (hw / "hw.ipynb").write_text(json.dumps(MASTER))
    (hw / "hw.tests.py").write_text(tests)
    return hw


def run(tmp_path, subs, out, **kw):
    kw.setdefault("seed", 1)
    return classroom.grade_class(str(subs), str(out), str(course(tmp_path)), box=BOX, progress=False, **kw)


def table(out):
    rows = list(csv.reader(io.StringIO((out / "grades.csv").read_text(encoding="utf-8"))))
    return rows[0], {r[0]: dict(zip(rows[0], r)) for r in rows[1:]}


@functools.lru_cache(maxsize=1)
def _bomb() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:   # 70 MB of zeros in a few KB
        z.writestr("hw.ipynb", b"\0" * (70 << 20))
    return buf.getvalue()


@pytest.fixture
def refused(tmp_path):
    """A submissions folder where every entry is refused or unreadable, one way each."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "big").mkdir()
    with open(subs / "big" / "hw.ipynb", "wb") as f:   # 100 MB, sparse: refused from its size alone
        f.truncate(100 << 20)
    with open(subs / "bigflat.ipynb", "wb") as f:
        f.truncate(100 << 20)
    (subs / "link").mkdir()
    os.symlink("/dev/zero", subs / "link" / "hw.ipynb")
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / "hw.ipynb")
    if os.geteuid() == 0:
        (subs / "device").mkdir()
        os.mknod(subs / "device" / "hw.ipynb", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    (subs / "locked").mkdir()
    (subs / "locked" / "hw.ipynb").write_text("{}")
    (subs / "bomb.zip").write_bytes(_bomb())
    latin = os.fsencode(subs) + b"/jos\xe9"
    os.mkdir(latin)
    with open(latin + b"/hw.ipynb", "wb") as f:
        f.write(b"not json")
    (subs / '=HYPERLINK("x")').mkdir()
    (subs / '=HYPERLINK("x")' / "hw.ipynb").write_text("[")
    return subs


def test_every_refusal_is_a_note_on_its_student_and_the_class_is_graded(tmp_path, refused, monkeypatch):
    real_open = os.open

    def unreadable(path, flags, *a, **kw):   # root reads every file: a read error is simulated
        if path == "hw.ipynb" and kw.get("dir_fd") is not None and "locked" in os.readlink(f"/proc/self/fd/{kw['dir_fd']}"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(submissions.os, "open", unreadable)
    out = tmp_path / "out"
    rendered = run(tmp_path, refused, out)
    header, rows = table(out)
    want = {"big", "bigflat", "link", "fifo", "locked", "bomb", "jos\\xe9", "'=HYPERLINK(\"x\")"} | (
        {"device"} if os.geteuid() == 0 else set())
    assert set(rows) == want and all(r["total (3)"] == "0" for r in rows.values())
    fb = lambda s: (out / "feedback" / f"{classroom.safe_name(s)}.txt").read_text(encoding="utf-8")
    assert "100 MB, over the 64 MB limit" in fb("big") and "100 MB, over the 64 MB limit" in fb("bigflat")
    assert "symbolic link" in fb("link") and "a FIFO" in fb("fifo") and "could not be read" in fb("locked")
    assert "once unpacked, over the limit" in fb("bomb")
    assert "not UTF-8 text" in fb("jos\\xe9") and "josé" in fb("jos\\xe9")
    if os.geteuid() == 0:
        assert "a device" in fb("device")
    for student, res in rendered.items():   # 0 points is never "all hidden checks passed"
        hidden = [t for t in res["tests"] if t["number"].endswith("h")]
        assert hidden and all("passed" not in t["output"] for t in hidden), student


def test_a_fault_of_the_grader_while_reading_costs_one_student_a_retry(tmp_path, refused, monkeypatch):
    real = submissions._scan_student

    def broken(root_fd, entry, student, *a):
        if entry == "fifo":
            raise TypeError("can only concatenate str (not \"list\") to str")
        return real(root_fd, entry, student, *a)
    monkeypatch.setattr(submissions, "_scan_student", broken)
    out = tmp_path / "out"
    run(tmp_path, refused, out)
    _, rows = table(out)
    assert rows["fifo"]["status"] == "grader error (rerun to retry)" and rows["big"]["total (3)"] == "0"
    assert "can only concatenate" in (out / "summary.txt").read_text()


def test_a_latin1_folder_maps_to_its_roster_row(tmp_path, refused):
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name,email\ns1,José,jose@uni.example\ns2,Absent Student,absent@uni.example\n")
    out = tmp_path / "out"
    run(tmp_path, refused, out, roster=str(roster))
    header, rows = table(out)
    assert header[:3] == ["student", "name", "email"]
    assert rows["s1"]["name"] == "José" and rows["s1"]["email"] == "jose@uni.example"
    assert rows["s2"]["status"] == "not submitted"
    summary = (out / "summary.txt").read_text()
    assert "(0 kept from an earlier run)" in summary   # an absent student is not a record kept


def test_out_inside_an_input_is_refused_before_anything_is_written(tmp_path, refused):
    hw = course(tmp_path)
    for out in (refused / "grades", hw / "grades", hw):
        with pytest.raises(SetupError, match="lies inside"):
            classroom.grade_class(str(refused), str(out), str(hw), box=BOX, progress=False)
    assert not (refused / "grades").exists() and not (hw / "grades").exists() and not (hw / "feedback").exists()


def test_a_failing_reference_leaves_nothing(tmp_path, refused):
    hw = course(tmp_path, TESTS.replace("Case(\"two\", (2.5,))", "Case(\"two\", (None,))"))
    with pytest.raises(SetupError, match="reference double fails"):
        classroom.grade_class(str(refused), str(tmp_path / "out"), str(hw), box=BOX, progress=False, seed=1)
    assert not (tmp_path / "out").exists()


def test_a_rerun_leaves_exactly_its_own_files(tmp_path, refused):
    out = tmp_path / "out"
    run(tmp_path, refused, out)
    assert (out / "feedback" / "fifo.txt").exists()
    (out / "feedback" / "MY_NOTES.txt").write_text("the instructor's own")
    (out / "results" / "x.json.milktea-tmp123").write_text("left by a killed run")
    shutil.rmtree(refused / "fifo")
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\nB,big\n")   # "big" is renamed B by the roster
    run(tmp_path, refused, out, roster=str(roster))
    names = set(os.listdir(out / "feedback"))
    assert "B.txt" in names and "big.txt" not in names and "fifo.txt" not in names
    assert "MY_NOTES.txt" in names and not (out / "results" / "x.json.milktea-tmp123").exists()
    assert not (out / ".state" / "fifo.json").exists() and (out / ".state" / "B.json").exists()
    assert json.loads((out / "run.json").read_text())["seed"] == 1
    run(tmp_path, refused, out, roster=str(roster), seed=None)   # the seed is kept unless given
    assert json.loads((out / "run.json").read_text())["seed"] == 1


def test_a_saved_grade_is_reused_only_while_the_whole_tests_file_is_the_same(tmp_path, refused):
    out = tmp_path / "out"
    run(tmp_path, refused, out)
    run(tmp_path, refused, out)
    assert "Graded 0 submissions" in (out / "summary.txt").read_text()
    course(tmp_path, TESTS.replace('"not the word"', '"not the word at all"'))   # the comparator alone
    classroom.grade_class(str(refused), str(out), str(tmp_path / "hw"), box=BOX, progress=False, seed=1)
    assert "Graded 0 submissions" not in (out / "summary.txt").read_text()


def test_overrides_late_policy_and_csv_cells(tmp_path, refused):
    (refused / "ada_LATE_111_222_hw.ipynb").write_text("[")
    (tmp_path / "over.csv").write_text("student,task,points,comment\nbig,hw.1,,see me\nfifo,hw.1,1.5,on paper\n"
                                       "ada,late,0,extension granted\n")
    (tmp_path / "times.csv").write_text("student,submitted\nlink,2026-12-03T10:00\n")
    out = tmp_path / "out"
    rendered = run(tmp_path, refused, out, overrides=str(tmp_path / "over.csv"), late_rule="10%/day",
                   due="2026-12-01T23:59", submitted=str(tmp_path / "times.csv"))
    header, rows = table(out)
    assert rows["big"]["status"] == "" and rows["fifo"]["status"] == "adjusted by the instructor"
    assert rows["fifo"]["total (3)"] == "1.5" and rows["fifo"]["late penalty"] == ""
    assert rows["link"]["late"] == "1.4 days" and rows["link"]["status"] == "late"
    assert rows["ada"]["late"] == "yes" and rows["ada"]["late penalty"] == "0"
    assert rendered["ada"]["extra_data"]["late"]["comment"] == "extension granted"
    assert "the instructor's comment: see me" in (out / "feedback" / "big.txt").read_text()
    assert "late penalty: -0 points" in (out / "feedback" / "ada.txt").read_text()
    assert "'=HYPERLINK" in (out / "grades.csv").read_text()


def test_gradescope_submission_times_are_compared_with_the_due_date(tmp_path):
    subs = tmp_path / "subs"
    when = {"1": "2026-12-01 15:00:00.000000000 -08:00", "2": "2026-12-02 21:47:00.123456789 -08:00",
            "3": "last Tuesday"}
    meta = ""
    for n, t in when.items():
        (subs / f"submission_{n}").mkdir(parents=True)
        (subs / f"submission_{n}" / "hw.ipynb").write_text("[")
        meta += (f"submission_{n}:\n  :submitters:\n  - :name: S{n}\n    :sid: '{n}'\n"
                 f"    :created_at: 2020-01-01 00:00:00 +00:00\n  :created_at: {t}\n  :score: 0.0\n")
    (subs / "submission_metadata.yml").write_text(meta)
    out = tmp_path / "out"
    run(tmp_path, subs, out, late_rule="10%", due="2026-12-01T23:59")
    _, rows = table(out)
    assert rows["submission_1"]["late"] == "" and rows["submission_1"]["status"] != "late"
    assert rows["submission_2"]["late"] == "1.2 days" and rows["submission_2"]["status"] == "late"
    assert rows["submission_3"]["late"] == ""
    assert "not a date (last Tuesday)" in (out / "feedback" / "submission_3.txt").read_text()
    with pytest.raises(SetupError, match="--due"):
        run(tmp_path, subs, tmp_path / "out2", late_rule="10%", due="Friday")


def test_late_rules():
    from milktea.grade import late
    rule = late.Rule.parse("10%/day,max=25%")
    assert (rule.penalty(8, 0.1), rule.penalty(8, 1.0), rule.penalty(8, 1.01), rule.penalty(8, -3)) == (0.8, 0.8, 1.6, 0)
    assert late.Rule.parse("20%").penalty(5, 9) == 1.0 and str(rule) == "10%/day,max=25%"
    for bad in ("10", "10%/week", "150%"):
        with pytest.raises(SetupError, match="late-penalty"):
            late.Rule.parse(bad)


def test_a_missing_checks_file_is_named_in_both_languages(tmp_path):
    from milktea.grade.check import check_notebook
    nb = dict(MASTER, metadata={"milktea": {"assignment": "hw", "lang": "zh"}})
    (tmp_path / "mine (1).ipynb").write_text(json.dumps(nb))
    with pytest.raises(SetupError) as e:
        check_notebook(str(tmp_path / "mine (1).ipynb"))
    assert str(tmp_path / "hw.checks.json") in str(e.value) and "找不到" in str(e.value)
    (tmp_path / "hw (1).ipynb").write_text(json.dumps(MASTER))
    with i18n.speaking("en"), pytest.raises(SetupError, match="public checks of hw are missing: expected at"):
        check_notebook(str(tmp_path / "hw (1).ipynb"))


def test_the_gradescope_bundle_keeps_the_instructors_files_and_seed(tmp_path):
    hw = course(tmp_path)
    bundle = tmp_path / "bundle"
    gradescope.build(str(bundle), str(hw))
    seed = json.loads((bundle / "config.json").read_text())["seed"]
    (bundle / "MY_NOTES.txt").write_text("mine")
    gradescope.build(str(bundle), str(hw))
    assert (bundle / "MY_NOTES.txt").read_text() == "mine"
    assert json.loads((bundle / "config.json").read_text())["seed"] == seed
    assert (bundle / "requirements.txt").read_text() == "numpy\n"   # no torch, numba or scikit-learn
    assert "download.pytorch.org" not in (bundle / "setup.sh").read_text()
    with pytest.raises(SetupError, match="lies inside"):
        gradescope.build(str(hw / "bundle"), str(hw))
    assert not (hw / "bundle").exists()
