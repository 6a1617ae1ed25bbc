"""One terminology for the Chinese edition (docs/glossary.zh.md, read by tools/zh_glossary.py):
the library's catalog and the Chinese notebooks use the settled terms, never the variants the
glossary lists; the checker itself is tested on small texts."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("zh_glossary", ROOT / "tools" / "zh_glossary.py")
zh_glossary = importlib.util.module_from_spec(_spec)
sys.modules["zh_glossary"] = zh_glossary  # dataclasses look their module up there
_spec.loader.exec_module(zh_glossary)


def test_glossary_parses_and_names_every_term_once():
    terms, fixed = zh_glossary.load()
    assert len(terms) > 50 and "中位数" in fixed
    names = [t.term for t in terms]
    assert len(names) == len(set(names)), "a term listed twice"
    by_name = {t.term: t for t in terms}
    assert by_name["报告"].avoid == ("报表",)  # the story's word wins
    assert "四舍五入" in by_name["就近舍入"].avoid
    for t in terms:  # the term is masked first: a variant that contains it could never be found
        assert not any(t.term in v for v in t.avoid), t


def test_checker_finds_a_variant_and_says_where():
    terms, fixed = zh_glossary.load()
    found = zh_glossary.violations("总部把报表念一遍，再四舍五入。", terms, fixed, where="x.ipynb cell 3")
    assert [(v.variant, v.term) for v in found] == [("报表", "报告"), ("四舍五入", "就近舍入")]
    assert "x.ipynb cell 3" in str(found[0]) and "报表" in str(found[0])


@pytest.mark.parametrize("text", ["先标准正交化", "取中位数", "32 位浮点", "总部还原完整的报告"])
def test_checker_leaves_the_right_words_alone(text):
    terms, fixed = zh_glossary.load()
    assert zh_glossary.violations(text, terms, fixed) == []


@pytest.mark.parametrize("text, variant", [("就称 $C$ 是一个 **$k$-压缩映射**", "k-压缩映射"),
                                           ("误差 / ($\\text{量化步长}$ / 2)", "量化步长"),
                                           ("Top-K 这类 $k$-压缩映射压缩器", "k-压缩映射")])
def test_checker_sees_terms_inside_math_and_emphasis(text, variant):
    """Math and bold marks split a term for the eye, not for the reader: they are read through."""
    terms, fixed = zh_glossary.load()
    assert variant in [v.variant for v in zh_glossary.violations(text, terms, fixed)]


@pytest.mark.parametrize("text, rule", [
    ("按 DGC（Lin 等（2018））的做法", zh_glossary.NESTED),
    ("**{scheme}**：预测 {p:.1f} ms，实测 {m:.1f} ms：{split}。", zh_glossary.COLONS),
    ("{path}：解压后比文件头声明的大：没有评分", zh_glossary.COLONS)])
def test_habits_are_found(text, rule):
    assert [h.rule for h in zh_glossary.habits(text, "x")] == [rule]


@pytest.mark.parametrize("text", ["DGC（Lin 等，2018）的做法", "预测：12 ms。实测：13 ms；模型：14 ms",
                                  "近似 Top-1%+EF（带动量修正）、符号压缩+EF（带动量修正）"])
def test_habits_leave_good_sentences_alone(text):
    assert zh_glossary.habits(text, "x") == []


def test_catalog_sentences_read_naturally():
    """The library's sentence templates: one ： per sentence at most (a label and its value), no
    brackets inside brackets (a citation inside brackets is （Lin 等，2018））."""
    problems = [h for where, text in zh_glossary.catalog_texts() for h in zh_glossary.habits(text, where)]
    assert not problems, "\n  ".join(map(str, problems))


def test_chinese_notebooks_cite_without_nested_brackets():
    """QSGD（Alistarh 等，2017）, not QSGD（Alistarh 等（2017））."""
    problems = [h for where, text in zh_glossary.notebook_texts()
                for h in zh_glossary.habits(text, where, colons=False, citations_only=True)]
    assert not problems, "\n  ".join(map(str, problems))


def test_catalog_follows_the_glossary():
    problems = zh_glossary.check(zh_glossary.catalog_texts())
    assert not problems, "use the glossary's terms (docs/glossary.zh.md):\n  " + "\n  ".join(map(str, problems))


def test_chinese_notebooks_follow_the_glossary():
    """Chapters, exercises and their masters alike (a learner reads all three)."""
    problems = zh_glossary.check(zh_glossary.notebook_texts(("notebooks/zh", "exercises/zh", "solutions/zh")))
    assert not problems, "use the glossary's terms (docs/glossary.zh.md):\n  " + "\n  ".join(map(str, problems))


def test_chinese_literals_in_the_library_follow_the_glossary():
    """Chinese written in milktea's own code (the grader's fixed messages, the font's hints)."""
    import ast
    import re
    cjk = re.compile(r"[\u4e00-\u9fff]")
    texts = [(f"{p.relative_to(ROOT)}:{node.lineno}", node.value)
             for p in sorted((ROOT / "milktea").rglob("*.py"))
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and cjk.search(node.value)]
    assert texts, "no Chinese literal found: the scan reads nothing"
    problems = zh_glossary.check(texts)
    assert not problems, "use the glossary's terms (docs/glossary.zh.md):\n  " + "\n  ".join(map(str, problems))


def test_chinese_chapters_have_no_italics():
    """Chinese has no italics (browsers slant CJK glyphs artificially): bold or plain text."""
    import json
    import re
    cjk_italic = re.compile(r"(?<![*\\A-Za-z0-9_])\*(?![*\s])[^*\n]*?[\u3400-\u9fff][^*\n]*?(?<!\s)\*(?![*A-Za-z0-9_])")
    found = []
    for path in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            found += [f"{path.name} {cell['id']}: {m.group(0)}" for m in cjk_italic.finditer("".join(cell["source"]))]
    assert not found, "\n".join(found)
