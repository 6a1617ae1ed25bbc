"""What an instructor hands the class grader besides notebooks, in process: LMS download names,
the roster, the overrides file, .py and .zip submissions, and how the outputs show hidden tests
at each stage of a course."""
import io
import json
import zipfile

import pytest

from milktea.grade import formats, lms, report
from milktea.grade.assignment import SetupError
from milktea.grade.evaluate import NotebookResult, TaskResult


def test_lms_names_give_the_student_and_the_file():
    assert lms.keys("lovelaceada_12345_678_03_topk.ipynb") == (["lovelaceada", "12345"], "03_topk.ipynb")
    assert lms.keys("lovelaceada_LATE_12345_678_03_topk-1.ipynb")[1] == "03_topk-1.ipynb"
    assert lms.keys("Ada Lovelace_4321_assignsubmission_file_") == (["Ada Lovelace", "4321"], None)
    assert lms.keys("alice") == ([], None) and lms.keys("03_topk.ipynb") == ([], None)
    meta = ("submission_99:\n  :submitters:\n  - :name: Ada Lovelace\n    :sid: '123'\n    :email: ada@x.org\n"
            "  :created_at: 2026-01-01\nsubmission_100:\n  :submitters:\n  - :name: Ben\n    :sid: ~\n")
    assert lms.gradescope_submitters(meta) == {"submission_99": ["Ada Lovelace", "123", "ada@x.org"],
                                               "submission_100": ["Ben"]}


def test_the_roster_maps_any_name_to_one_id(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("\ufeffName,SID,Email\nAda Lovelace,s01,ada@x.org\nBen  Okafor,s02,\n")
    roster = lms.Roster.read(str(path))
    assert roster.ids == ["s01", "s02"]
    assert roster.find(["nobody", "ADA@X.ORG"]) == "s01" and roster.find(["ben okafor"]) == "s02"
    assert roster.find(["carol"]) is None
    for text, words in [("id\n", "a header row and one row"), ("id,name\ns1,A\ns1,B\n", "appears twice"),
                        ("id,name\ns1,Same\ns2,same\n", "names both s1 and s2"), ("id,name\n,A\n", "no student id")]:
        path.write_text(text)
        with pytest.raises(SetupError, match=words):
            lms.Roster.read(str(path))


def test_overrides_are_read_and_checked(tmp_path):
    path = tmp_path / "o.csv"
    path.write_text("student,task,points,comment\ns01,03.1,1.5,good idea\ns02,03.2,,see me\n")
    assert lms.read_overrides(str(path)) == [("s01", "03.1", 1.5, "good idea"), ("s02", "03.2", None, "see me")]
    for text, words in [("who,what\n", "must start with the header"), ("student,task,points,comment\ns1,,1,\n",
                                                                        "a student and a task id"),
                        ("student,task,points,comment\ns1,t,lots,\n", "is not a number"),
                        ("student,task,points,comment\ns1,t,-1,\n", ">= 0")]:
        path.write_text(text)
        with pytest.raises(SetupError, match=words):
            lms.read_overrides(str(path))


def test_a_python_file_is_graded_as_the_cells_it_holds():
    plain = formats.submission(b"def f(x):\n    return x\n", "hw1.py")
    assert plain.nb["cells"][0]["source"] == "def f(x):\n    return x\n" and "a Python file" in str(plain.note)
    split = formats.notebook_from_python(b'# %% [markdown]\n# # Title\n# %% tags=["graded", "task:1"]\n'
                                         b"def f(x):\n    return x\n# %%\nprint(f(1))\n")
    assert [c["cell_type"] for c in split["cells"]] == ["markdown", "code", "code"]
    assert split["cells"][1]["metadata"]["tags"] == ["graded", "task:1"]
    assert str(formats.submission(b"\xff\xfe", "bad.py").error).endswith("save it as UTF-8")


def _zip(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_a_zip_is_read_in_memory_and_bounded(monkeypatch):
    nb = json.dumps({"cells": [], "metadata": {}}).encode()
    members, notes = formats.zip_members(_zip({"hw/03_topk.ipynb": nb, "hw/a.py": b"x = 1\n", "hw/readme.txt": b"hi",
                                               "__MACOSX/._03_topk.ipynb": b"junk"}), "up.zip")
    assert [m for m, _ in members] == ["up.zip/hw/03_topk.ipynb", "up.zip/hw/a.py"]
    assert "ignored readme.txt" in notes[0]
    monkeypatch.setattr(formats, "MAX_ZIP_BYTES", 1000)
    bomb = _zip({"big.ipynb": b"{" + b" " * 100_000 + b"}"})   # 100 KB from a few hundred bytes
    members, notes = formats.zip_members(bomb, "bomb.zip")
    assert members == [] and "over the limit" in notes[0]
    assert "not a zip file" in formats.zip_members(b"PK\x03\x04 not really", "x.zip")[1][0]


def _result(visibility="after_due_date"):
    task = TaskResult("1", "f", "One", 2, score=1.2, passed=6, total=10, public_total=6, public_passed=6,
                      kind="wrong", public_kind="", lines=[], hidden_lines=["4 of 4 hidden checks failed"],
                      visibility=visibility)
    return NotebookResult("hw", "hw.ipynb", [task])


def test_hidden_results_follow_the_stage_and_overrides_win():
    before = report.view(_result(), "before_due_date", {}).tasks[0]
    assert (before.score, before.points, before.kind) == (1.2, 1.2, "")   # the public part only
    assert "results after the due date" in before.lines[-1] and "failed" not in " ".join(before.lines)
    after = report.view(_result(), "after_due_date", {}).tasks[0]
    assert (after.score, after.points) == (1.2, 2) and after.lines == ["4 of 4 hidden checks failed"]
    assert report.view(_result("after_published"), "after_due_date", {}).tasks[0].points == 1.2
    assert report.view(_result("hidden"), "published", {}).tasks[0].lines == []
    changed = report.view(_result(), "before_due_date", {"1": report.Override(2.0, "fine")}).tasks[0]
    assert (changed.score, changed.points) == (2.0, 2) and "adjusted by the instructor: fine" in changed.lines[-1]


def test_results_json_has_a_part_per_visibility():
    record = {"student": "a", "seed": 3, "lang": "en", "results": [_result().to_dict()]}
    data = report.results_json("a", record, {})
    assert [(t["name"], t["score"], t["max_score"], t["visibility"], t["status"]) for t in data["tests"]] == [
        ("1 One", 1.2, 1.2, "visible", "passed"), ("1 One (hidden tests)", 0.0, 0.8, "after_due_date", "failed")]
    assert report.task_scores(data) == {"1": 1.2} and data["score"] == 1.2 and data["extra_data"]["seed"] == 3
    adjusted = report.results_json("a", record, {"1": report.Override(1.5, "ok")})
    assert [(t["score"], t["max_score"]) for t in adjusted["tests"]] == [(1.5, 2)]
    assert adjusted["extra_data"]["overrides"] == [{"task": "1", "points": 1.5, "comment": "ok", "autograder": 1.2}]


def test_the_score_column_lines_up_in_chinese_too():
    from milktea import i18n
    from milktea.grade.check import format_result
    from milktea.tables import display_width
    tasks = [TaskResult(f"0{i}.1", "f", title, 2, total=1, public_total=1) for i, title in
             enumerate(["阈值", "留下最大的，其余置零", "Top-K threshold", "送上线路的内容"], 1)]
    with i18n.speaking("zh"):
        lines = format_result(NotebookResult("hw", "hw.ipynb", tasks)).splitlines()
    assert len({display_width(line.split("...")[0] + "." * line.count(".")) for line in lines}) == 1, lines
