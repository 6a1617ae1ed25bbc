"""The Chinese edition (notebooks/zh, solutions/zh) stays in step with the English one.

The rules (tools/zh_parity.py): every English chapter and solution has a twin under zh/;
same cells, order, types, ids and metadata; code equal once comments are dropped and string
literals blanked; the twin's markdown mostly Chinese; the Chinese chapters call
i18n.use("zh"). The checker itself is tested on small notebooks built here.
"""
import copy
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("zh_parity", ROOT / "tools" / "zh_parity.py")
zh_parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zh_parity)

ENGLISH = zh_parity.english_notebooks()


def _id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", ENGLISH, ids=_id)
def test_chinese_twin_is_in_step(path):
    problems = zh_parity.check_pair(path)
    assert not problems, "\n".join(problems)


def test_english_chapters_name_their_language():
    for path in ROOT.glob("notebooks/*.ipynb"):
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert zh_parity.language_call(nb) == "en", f"{_id(path)}: the first code cell must call i18n.use(\"en\")"


def test_every_chinese_notebook_has_an_english_original():
    for folder in zh_parity.FOLDERS:
        for path in (ROOT / folder / "zh").glob("*.ipynb"):
            assert (ROOT / folder / path.name).exists(), f"{_id(path)} has no English original {folder}/{path.name}"


# ---------------------------------------------------------------- the checker itself

def _cell(kind, source, cid, **meta):
    cell = {"cell_type": kind, "id": cid, "metadata": meta, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _pair():
    en = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        _cell("markdown", "# Top-K\n\nKeep the $K$ largest entries: `topk(g, k)`.", "intro"),
        _cell("code", 'from milktea import i18n\ni18n.use("en")\nimport torch', "setup"),
        _cell("code", '# keep 1%\nk = int(0.01 * n)\nprint(f"kept {k:,} of {n:,} ({k / n:.1%})")\n'
                      'plot(xs, label="density")', "keep", tags=["demo"]),
        _cell("code", "def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION", "task"),
    ]}
    zh = copy.deepcopy(en)
    zh["cells"][0]["source"] = "# Top-K 稀疏化\n\n只保留绝对值最大的 $K$ 个元素：`topk(g, k)`。"
    zh["cells"][1]["source"] = 'from milktea import i18n\ni18n.use("zh")\nimport torch'
    zh["cells"][2]["source"] = ('# 保留 1%\nk = int(0.01 * n)\nprint(f"保留了 {k:,} / {n:,}（{k / n:.1%}）")\n'
                                'plot(xs, label="密度")')
    return en, zh


def test_checker_accepts_a_faithful_twin():
    en, zh = _pair()
    assert zh_parity.compare(en, zh) == []
    assert zh_parity.language_call(zh) == "zh" and zh_parity.language_call(en) == "en"


@pytest.mark.parametrize("edition", ["en", "zh"])
def test_checker_catches_code_changed_in_one_edition(edition):
    en, zh = _pair()
    nb = en if edition == "en" else zh
    nb["cells"][2]["source"] = nb["cells"][2]["source"].replace("0.01", "0.02")
    problems = zh_parity.compare(en, zh, "notebooks/zh/03_topk.ipynb")
    assert len(problems) == 1, problems
    assert "notebooks/zh/03_topk.ipynb: cell 2 (id keep" in problems[0] and "code differs" in problems[0]


@pytest.mark.parametrize("change, expect", [
    (lambda en, zh: zh["cells"][2]["source"].__len__() and zh["cells"][2].update(
        source=zh["cells"][2]["source"].replace(":.1%", ":.2%")), "cell 2 (id keep"),           # a format spec
    (lambda en, zh: zh["cells"][2].update(source=zh["cells"][2]["source"].replace("xs", "ys")), "code differs"),
    (lambda en, zh: zh["cells"][2]["metadata"].update(tags=[]), "metadata differ"),
    (lambda en, zh: zh["cells"][0].update(id="intro-zh"), "cell ids differ"),
    (lambda en, zh: zh["cells"].append(_cell("markdown", "多一个", "extra")), "only in Chinese: ['extra']"),
    (lambda en, zh: zh["cells"].reverse(), "order change"),
    (lambda en, zh: zh["cells"][0].update(source=en["cells"][0]["source"]), "not mostly Chinese"),
    (lambda en, zh: zh["cells"][0].update(cell_type="raw"), "a markdown cell in English, raw in Chinese"),
    (lambda en, zh: zh["cells"][3].update(source=zh["cells"][3]["source"].replace("### END SOLUTION", "# end")),
     "solution markers"),
])
def test_checker_catches_each_kind_of_drift(change, expect):
    en, zh = _pair()
    change(en, zh)
    problems = zh_parity.compare(en, zh)
    assert any(expect in p for p in problems), problems


def test_checker_on_files_and_the_language_call(tmp_path, monkeypatch):
    en, zh = _pair()
    (tmp_path / "notebooks" / "zh").mkdir(parents=True)
    path = tmp_path / "notebooks" / "03_topk.ipynb"
    path.write_text(json.dumps(en), encoding="utf-8")
    assert zh_parity.check_pair(path) == [f"{path}: the Chinese twin {zh_parity.twin(path)} is missing"]
    zh["cells"][1]["source"] = zh["cells"][1]["source"].replace('"zh"', '"en"')
    zh_parity.twin(path).write_text(json.dumps(zh), encoding="utf-8")
    problems = zh_parity.check_pair(path)
    assert len(problems) == 1 and 'i18n.use("zh")' in problems[0]
    assert zh_parity.main([str(path)]) == 1


def test_mostly_chinese_ignores_code_math_and_links():
    assert zh_parity.mostly_chinese("误差反馈（error feedback）把丢掉的部分记在旧账本里，下次再发。")
    assert zh_parity.mostly_chinese("$$\\sum_i g_i$$")
    assert zh_parity.mostly_chinese("见 [第三章](03_topk.ipynb)：`milktea.TopK(ratio=0.01).compress(g)`")
    assert not zh_parity.mostly_chinese("Error feedback keeps what was dropped 误差")


def test_checker_sees_through_magics():
    a = "%matplotlib inline\nx = 1"
    assert zh_parity.blanked(a) == zh_parity.blanked("%matplotlib inline\nx = 1  # 一")
    assert zh_parity.blanked(a) != zh_parity.blanked("%matplotlib widget\nx = 1")


def test_the_chinese_readme_carries_every_command_and_code_line_of_the_readme():
    """README.zh-CN.md says everything README.md says: every line of its code blocks (comments
    aside, which are translated) appears in the Chinese README too."""
    import re
    root = Path(__file__).resolve().parents[2]

    def code_lines(name):
        text = (root / name).read_text(encoding="utf-8")
        out = []
        for block in re.findall(r"```\w+\n(.*?)```", text, re.S):
            for line in block.splitlines():
                line = re.split(r"\s#\s|^#", line)[0].strip()
                if line:
                    out.append(line)
        return out
    chinese = set(code_lines("README.zh-CN.md"))
    missing = [line for line in code_lines("README.md") if line not in chinese]
    assert not missing, "README.zh-CN.md lacks these lines of README.md's code blocks:\n  " + "\n  ".join(missing)
