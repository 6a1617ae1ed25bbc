"""Lists of the course that must match the folder: the READMEs' exercise column names every
exercise of exercises/ and no other (the welcome chapter reads its list from the folder)."""
import re
from pathlib import Path

import pytest

from milktea.experiments.course import course_root, exercise_table, exercises

ROOT = Path(__file__).resolve().parents[2]


def _exercise_column(readme: Path) -> dict:
    """{chapter number: exercise name or None} from the course table (last column: `NN_slug` or —)."""
    rows = re.findall(r"^\| (\d\d[a-z]?) \|.*\| (`[a-z0-9_]+`|—) \|$", readme.read_text(encoding="utf-8"), re.M)
    assert rows, f"{readme.name}: no course table with an exercise column"
    return {ch: None if ex == "—" else ex.strip("`") for ch, ex in rows}


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_readme_lists_the_exercises_that_exist(readme):
    listed = _exercise_column(ROOT / readme)
    for lang in ("en", "zh"):
        there = {e.chapter: e.name for e in exercises(ROOT, lang)}
        assert {ch: ex for ch, ex in listed.items() if ex} == there, \
            f"{readme}'s exercise column does not match exercises/{'zh/' if lang == 'zh' else ''}: {listed} vs {there}"
    chapters = {p.name.split("_")[0] for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")}
    assert set(listed) == chapters, f"{readme}: the course table lists chapters {sorted(listed)}, notebooks/ holds {sorted(chapters)}"


def test_the_list_follows_the_folder(tmp_path):
    """An exercise appears once its notebook and checks are there, and only then."""
    for sub in ("notebooks", "exercises", "exercises/zh", "notebooks/zh"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    nb = '{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# 09 · The shared recipe book"}, ' \
         '{"cell_type": "code", "metadata": {"tags": ["graded", "task:09.1"]}, "source": ""}]}'
    (tmp_path / "notebooks" / "09_sharding.ipynb").write_text(nb)
    assert exercises(tmp_path, "en") == []
    (tmp_path / "exercises" / "09_sharding.ipynb").write_text(nb)
    assert exercises(tmp_path, "en") == []            # no public checks beside it: not released
    (tmp_path / "exercises" / "09_sharding.checks.json").write_text("{}")
    [e] = exercises(tmp_path, "en")
    assert (e.name, e.chapter, e.title, e.tasks) == ("09_sharding", "09", "The shared recipe book", 1)
    assert exercises(tmp_path, "zh") == []            # the Chinese notebook is not there yet
    rows = exercise_table(tmp_path, "en")
    assert [list(r.values()) for r in rows] == [["`exercises/09_sharding.ipynb`", "09 · The shared recipe book", 1]]
    assert course_root(tmp_path / "exercises") == tmp_path
    with pytest.raises(FileNotFoundError, match="make lab"):
        course_root("/")
