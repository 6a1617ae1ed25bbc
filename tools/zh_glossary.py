"""One terminology for the Chinese edition: docs/glossary.zh.md, read and enforced.

The glossary is a Markdown table (术语 | English | 不写作 | 用法): the settled term, its
English name, the variants that must not appear, and where it is used. A second table
(固定说法) lists words that contain a variant but are right as they are (中位数 holds 位数).
`violations(text)` reads the text as a reader does (math and emphasis marks dropped, so that
`$k$-压缩映射` is seen as k-压缩映射), masks the row's own term and those words, then finds
the variants.
Run from the repository root to check every Chinese text the project ships:

    python tools/zh_glossary.py            # exit 1 and one line per variant found

    >>> rows = [Term("标准正交化", "orthonormalisation", ("正交化",), "")]
    >>> [v.variant for v in violations("先正交化，再标准正交化", rows, ())]
    ['正交化']
    >>> violations("中位数", [Term("比特", "bit", ("位数",), "")], ("中位数",))
    []
    >>> [v.variant for v in violations("称 $C$ 为 **$k$-压缩映射**", [Term("k-压缩算子", "", ("k-压缩映射",), "")], ())]
    ['k-压缩映射']
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.zh.md"
CATALOG = ROOT / "milktea" / "locale" / "zh_CN" / "LC_MESSAGES" / "milktea.po"
NOTEBOOK_FOLDERS = ("notebooks/zh", "exercises/zh", "solutions/zh")


@dataclass(frozen=True)
class Term:
    term: str
    english: str
    avoid: tuple[str, ...]
    usage: str


@dataclass(frozen=True)
class Violation:
    where: str
    variant: str
    term: str
    context: str

    def __str__(self):
        return f"{self.where}: {self.variant!r} -> {self.term!r} (…{self.context}…)"


def _table(markdown: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after `## heading`, as lists of stripped cells."""
    section = markdown.split(f"## {heading}", 1)
    if len(section) < 2:
        raise ValueError(f"{GLOSSARY.name}: no section '## {heading}'")
    rows = []
    for line in section[1].splitlines():
        line = line.strip()
        if line.startswith("## "):
            break
        if line.startswith("|") and not re.fullmatch(r"\|[\s|:-]+\|", line):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # the header row


def load(path: Path = GLOSSARY) -> tuple[list[Term], tuple[str, ...]]:
    """The glossary's terms and its fixed phrases."""
    text = path.read_text(encoding="utf-8")
    terms = []
    for cells in _table(text, "术语"):
        if len(cells) != 4 or not cells[0] or not cells[1]:
            raise ValueError(f"{path.name}: a term row needs 4 cells (term, English, avoid, usage): {cells}")
        avoid = tuple(v.strip() for v in cells[2].split("、") if v.strip())
        terms.append(Term(cells[0], cells[1], avoid, cells[3]))
    fixed = tuple(cells[0] for cells in _table(text, "固定说法") if cells and cells[0])
    return terms, fixed


_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+)\$|\\\((.+?)\\\)", re.S)
_LATEX = re.compile(r"\\(?:text|mathrm|mathbf|mathit|operatorname|textbf)\s*\{([^{}]*)\}|\\[A-Za-z]+\s*|\\[,;:! ]|[{}]")


def plain(text: str) -> str:
    r"""`text` as a reader sees it: math shown by its content (\text{...} kept, other commands
    and braces dropped), bold and italic marks removed, so that no markup splits a term.

    >>> plain(r"**$k$-压缩映射**、$\text{格宽}\,s$")
    'k-压缩映射、格宽s'
    """
    text = _MATH.sub(lambda m: _LATEX.sub(lambda c: c.group(1) or "", next(g for g in m.groups() if g is not None)),
                     text)
    return re.sub(r"\*\*|__|(?<!\*)\*(?!\*)", "", text)


def violations(text: str, terms, fixed, where: str = "") -> list[Violation]:
    text = plain(text)
    found = []
    for t in terms:
        if not t.avoid:
            continue
        masked = text
        for keep in (t.term, *fixed):
            masked = masked.replace(keep, "\0" * len(keep))  # same length: positions stay
        for variant in t.avoid:
            for m in re.finditer(re.escape(variant), masked):
                context = text[max(0, m.start() - 12):m.end() + 12].replace("\n", " ")
                found.append(Violation(where, variant, t.term, context))
    return found


@dataclass(frozen=True)
class Habit:
    """A habit the editor flagged: `rule` says which, `context` where."""
    where: str
    rule: str
    context: str

    def __str__(self):
        return f"{self.where}: {self.rule} (…{self.context}…)"


NESTED = "nested brackets: write a citation inside brackets as （Lin 等，2018）, a name's qualifier without its own brackets"
COLONS = "more than one ： in a sentence: keep one (a label and its value), turn the others into ，or a new sentence"
_SENTENCE_END = re.compile(r"[。！？；\n]")


_YEAR = re.compile(r"（\d{4}[a-z]?）")


def habits(text: str, where: str = "", colons: bool = True, citations_only: bool = False) -> list[Habit]:
    """Nested full-width brackets (with `citations_only`, only a year in brackets inside
    brackets: a citation), and (with `colons`) sentences with more than one ：.

    >>> [h.rule == NESTED for h in habits("DGC（Lin 等（2018））的核心")]
    [True]
    >>> habits("（要预留几个比特防止溢出（overflow）。）", colons=False, citations_only=True)
    []
    >>> [h.rule == COLONS for h in habits("预测：{p} ms，实测 {m} ms：{split}。下一句：好。")]
    [True]
    >>> habits("QSGD（Alistarh 等，2017）：无偏。")
    []
    """
    text = plain(text)
    found, depth = [], 0
    for i, ch in enumerate(text):
        if ch == "（":
            depth += 1
            if depth >= 2 and (not citations_only or _YEAR.match(text, i)):
                found.append(Habit(where, NESTED, text[max(0, i - 20):i + 20].replace("\n", " ")))
        elif ch == "）":
            depth = max(0, depth - 1)
    if colons:
        for sentence in _SENTENCE_END.split(text):
            if sentence.count("：") > 1:
                found.append(Habit(where, COLONS, sentence.strip()[:80]))
    return found


def catalog_texts(path: Path = CATALOG):
    """(where, text) for every Chinese translation in the library's catalog."""
    from babel.messages.pofile import read_po
    with open(path, "rb") as f:
        for m in read_po(f):
            strings = m.string if isinstance(m.string, (list, tuple)) else [m.string]
            for s in strings:
                if m.id and s:
                    yield f"{path.relative_to(ROOT)}: msgid {m.id!r}", s


def notebook_texts(folders=NOTEBOOK_FOLDERS, root: Path = ROOT):
    """(where, text) for every cell of the Chinese notebooks (markdown and code: comments
    and strings in code are read by learners too)."""
    for folder in folders:
        for path in sorted((root / folder).glob("*.ipynb")):
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            for i, cell in enumerate(cells):
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                yield f"{path.relative_to(root)} cell {cell.get('id', i)}", source


def check(sources) -> list[Violation]:
    terms, fixed = load()
    return [v for where, text in sources for v in violations(text, terms, fixed, where)]


def main() -> int:
    problems = check([*catalog_texts(), *notebook_texts()])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
