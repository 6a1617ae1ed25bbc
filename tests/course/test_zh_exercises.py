"""The Chinese exercises: generated from solutions/zh like the English ones, graded the same
(same task ids, same points, same scores), with feedback in Chinese.

The real solutions/zh twins are checked when present; the generator and the grader are
checked here on a Chinese solution made from an English one by translating one markdown cell.
"""
import copy
import json
import re
import shutil

import pytest

from _grade_helpers import CHAPTERS, EXERCISES, HIDDEN, SOLUTIONS, prepared as prepare, save, solution, tasks, with_cell
from milktea.grade import make_exercises
from milktea.grade.check import check_notebook
from milktea.grade.classroom import grade_class
from milktea.grade.report import feedback
from milktea.grade.evaluate import grade_notebook
from milktea.grade.notebook import cell_tasks, notebook_language, notebook_text, read_notebook
from milktea.grade.sandbox import Limits

CHAPTER = "03_topk"
ZH_SOLUTIONS = sorted((SOLUTIONS / "zh").glob("*.ipynb"))


def _tasks(nb: dict) -> list[str]:
    return [t for c in nb["cells"] for t in cell_tasks(c)]


def _chinese(nb: dict) -> dict:
    """`nb` with its first markdown cell told in Chinese (the rest as it is)."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    cell["source"] = "# 练习 3：Top-K 稀疏化\n\n只保留绝对值最大的 K 个元素，其余置零；总部据此还原完整的报表。"
    heading = next(c for c in nb["cells"] if c["source"].startswith("## Task 03.1"))
    heading["source"] = heading["source"].replace("## Task 03.1 · The threshold (2 points)", "## 任务 03.1 · 阈值（2 分）")
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of solutions/ with a Chinese solutions/zh/03_topk.ipynb, and the exercises
    make_exercises writes from it."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(SOLUTIONS, root / "solutions", ignore=shutil.ignore_patterns("zh"))
    save(_chinese(solution(CHAPTER)), root / "solutions" / "zh" / f"{CHAPTER}.ipynb")
    assert make_exercises.main(["--solutions", str(root / "solutions"), "--exercises", str(root / "exercises")]) == 0
    return root


def test_make_exercises_writes_the_chinese_edition(course):
    zh = read_notebook(str(course / "exercises" / "zh" / f"{CHAPTER}.ipynb"))
    en = read_notebook(str(course / "exercises" / f"{CHAPTER}.ipynb"))
    assert (course / "exercises" / f"{CHAPTER}.ipynb").read_text() == (EXERCISES / f"{CHAPTER}.ipynb").read_text()
    assert _tasks(zh) == _tasks(en) == [t.id for t in tasks(CHAPTER)]
    assert zh["metadata"]["milktea"]["lang"] == "zh" and "lang" not in en["metadata"]["milktea"]
    # the same cells, but the scaffolds speak Chinese (and two markdown cells were translated)
    en_stub, zh_stub = make_exercises.release.STUBS["en"], make_exercises.release.STUBS["zh"]
    same = lambda src: src.replace(zh_stub[0], en_stub[0]).replace(zh_stub[1], en_stub[1])
    assert [same(c["source"]) for c in zh["cells"] if c["cell_type"] == "code"] == \
        [c["source"] for c in en["cells"] if c["cell_type"] == "code"]
    stubs = [c["source"] for c in zh["cells"] if c["cell_type"] == "code" and "NotImplementedError" in c["source"]]
    assert len(stubs) == len(tasks(CHAPTER)) and all(zh_stub[0] in s and zh_stub[1] in s and "YOUR CODE" not in s for s in stubs)
    assert zh["cells"][0]["source"].startswith("# 练习 3")
    assert notebook_language("anywhere/03_topk.ipynb", zh) == "zh"
    assert notebook_language("exercises/03_topk.ipynb", en) == "en"
    assert make_exercises.main(["--check", "--solutions", str(course / "solutions"),
                                "--exercises", str(course / "exercises")]) == 0
    (course / "exercises" / "zh" / f"{CHAPTER}.ipynb").write_text("{}")
    assert make_exercises.main(["--check", "--solutions", str(course / "solutions"),
                                "--exercises", str(course / "exercises")]) == 1
    assert make_exercises.main(["--solutions", str(course / "solutions"), "--exercises", str(course / "exercises")]) == 0


def test_chinese_solution_and_exercise_grade_like_the_english_ones(course):
    prepared = prepare(CHAPTER, seed=5)
    score = lambda path: [(t.id, t.points, t.score, t.kind) for t in grade_notebook(str(path), prepared).tasks]
    en_sol, zh_sol = score(course / "solutions" / f"{CHAPTER}.ipynb"), score(course / "solutions" / "zh" / f"{CHAPTER}.ipynb")
    assert zh_sol == en_sol == [(t.id, t.points, t.points, "") for t in tasks(CHAPTER)]
    en_ex, zh_ex = score(course / "exercises" / f"{CHAPTER}.ipynb"), score(course / "exercises" / "zh" / f"{CHAPTER}.ipynb")
    assert zh_ex == en_ex and all(score == 0 for _, _, score, _ in zh_ex)


WRONG = "import numpy as np\n\ndef topk_threshold(x, k):\n    return 0.0\n"


def test_class_feedback_in_each_learners_language(course, tmp_path):
    """Two learners hand in the same wrong answer, one in each edition: same scores, and each
    feedback file in the language of its notebook (the folder is the student's name)."""
    subs = tmp_path / "subs"
    for student, path in (("zh", course / "exercises" / "zh" / f"{CHAPTER}.ipynb"),
                          ("en", course / "exercises" / f"{CHAPTER}.ipynb")):
        save(with_cell(read_notebook(str(path)), "03.1", WRONG), subs / student / f"{CHAPTER}.ipynb")
    records = grade_class(str(subs), str(tmp_path / "out"), str(SOLUTIONS), str(HIDDEN), seed=7, progress=False,
                          limits=Limits(task_seconds=3, submission_seconds=60, memory_mb=1024), chapter=CHAPTER)
    scores = {s: [(t["name"].split()[0], t["score"], t["max_score"]) for t in r["tests"]] for s, r in records.items()}
    assert scores["zh"] == scores["en"] and scores["zh"][0][1] < scores["zh"][0][2]
    zh = (tmp_path / "out" / "feedback" / "zh.txt").read_text(encoding="utf-8")
    en = (tmp_path / "out" / "feedback" / "en.txt").read_text(encoding="utf-8")
    assert "zh 的反馈" in zh and "答案错误" in zh and "应为" in zh and "用例 '" in zh and "总分" in zh, zh
    assert "Feedback for en" in en and "wrong answer" in en and "expected" in en and not any(
        "\u4e00" <= ch <= "\u9fff" for ch in en), en


# every way a Chinese learner's task can fail, each in its own task, plus a file refused and a .py left over
MISTAKES = {
    "03.1": "import numpy as np\n\ndef topk_threshold(x, k):\n    return float(np.abs(x).max())\n",
    "03.2": "def topk_sparsify(x, k):\n    return open('/srv/answers.txt').read()\n",
    "03.3": "def topk_pack(x, k):\n    while True:\n        pass\n",
    "03.4": "def topk_unpak(indices, values, shape):\n    return values\n",
}
ENGLISH = re.compile(r"[A-Za-z]{3,}(?:[ ,;:]+[A-Za-z]{3,})+")   # two English words in a row: a phrase


def _english_phrases(text: str) -> list:
    """English phrases left in Chinese feedback, once code, names and values are set aside."""
    for code in (r"`[^`]*`", r"'[^'\n]*'", r"\w+\(.*\)", r"\w+Error: .*", r"\[[^\]]*\]", r"\S+\.(?:ipynb|py)\b"):
        text = re.sub(code, " ", text)
    return ENGLISH.findall(text)


def test_chinese_feedback_has_no_english_left(course, tmp_path):
    """Case labels, values, cell names, locations, refusals, time limits, missing functions: all
    in Chinese. What stays is code: the call, the learner's own line, Python's exception text."""
    nb = read_notebook(str(course / "exercises" / "zh" / f"{CHAPTER}.ipynb"))
    for task, source in MISTAKES.items():
        nb = with_cell(nb, task, source)
    save(nb, tmp_path / "subs" / "xiaoming" / f"{CHAPTER}.ipynb")
    (tmp_path / "subs" / "xiaoming" / "notes.txt").write_text("草稿")
    grade_class(str(tmp_path / "subs"), str(tmp_path / "out"), str(SOLUTIONS), None, seed=7, progress=False,
                limits=Limits(task_seconds=2, submission_seconds=60, memory_mb=1024, wall_factor=2), chapter=CHAPTER)
    text = (tmp_path / "out" / "feedback" / "xiaoming.txt").read_text(encoding="utf-8")
    assert "秒 CPU 时间内完成" in text or "秒墙钟时间内完成" in text, text   # which clock stops it depends on load
    for words in ("用例 '", "数组，形状", "任务 03.2 的单元格第 2 行", "评分代码不能读取",
                  "没有名为 topk_unpack 的函数", "已忽略 notes.txt"):
        assert words in text, (words, text)
    assert _english_phrases(text) == [], text
    assert all(len(line) < 2 or "...." not in line or line.index(" ", line.index("....")) > 0 for line in text.splitlines())


def test_feedback_is_in_the_notebooks_language(course, capsys):
    zh_ex = course / "exercises" / "zh" / f"{CHAPTER}.ipynb"
    res = check_notebook(str(zh_ex))
    out = capsys.readouterr().out
    assert "用公开测试检查 03_topk.ipynb" in out and "尚未实现" in out and "公开测试得分：0/" in out
    assert "03.1 阈值 ..." in out  # the task's title: the heading of its cell in the Chinese notebook
    check_notebook(str(course / "exercises" / f"{CHAPTER}.ipynb"))
    out = capsys.readouterr().out
    assert "Checking 03_topk.ipynb on the public tests" in out and "not implemented yet" in out
    assert "03.1 The threshold ..." in out
    record = lambda lang: {"lang": lang, "results": [res.to_dict()]}
    assert "总分" in feedback("小明", record("zh"), "published", {}) and \
        "Total:" in feedback("Ming", record("en"), "published", {})


@pytest.mark.parametrize("path", ZH_SOLUTIONS, ids=lambda p: f"solutions/zh/{p.name}")
def test_real_chinese_solution_has_the_english_tasks(path):
    assert path.stem in CHAPTERS, f"solutions/zh/{path.name} has no English original"
    assert _tasks(read_notebook(str(path))) == [t.id for t in tasks(path.stem)]
    made = notebook_text(make_exercises.exercise_from(read_notebook(str(path)), "zh", path.stem))
    assert (EXERCISES / "zh" / path.name).read_text(encoding="utf-8") == made, \
        "exercises/zh/ is out of date: run python -m milktea.grade.make_exercises"
    assert json.loads(made)["metadata"]["milktea"]["lang"] == "zh"


def test_every_chinese_exercise_has_a_chinese_solution():
    for path in (EXERCISES / "zh").glob("*.ipynb"):
        assert (SOLUTIONS / "zh" / path.name).exists(), f"exercises/zh/{path.name} has no solutions/zh/{path.name}"
