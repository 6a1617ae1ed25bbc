"""Keep the Chinese edition in step with the English one (the rules of tests/unit/test_zh_parity.py).

Every English notebook `DIR/NAME.ipynb` (DIR = notebooks or solutions) has a Chinese twin
`DIR/zh/NAME.ipynb` with the same cells in the same order: same types, ids and metadata.
Code cells are equal once comments are dropped and every string literal is blanked (the
text of f-strings too, not their format specs), so only comments and words may differ.
Markdown cells of the twin are mostly Chinese. Run from the repository root:

    python tools/zh_parity.py                              # every pair; exit 1 on a problem
    python tools/zh_parity.py notebooks/03_topk.ipynb      # one pair

    >>> blanked('print(f"kept {k:,} of {n}")  # comment') == blanked('print(f"保留 {k:,} / {n}")')
    True
    >>> blanked('x = 1') == blanked('x = 2')
    False
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("notebooks", "solutions")
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")  # make_exercises reads these comments
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")
# what is not prose in markdown: fenced code, inline code, display and inline math,
# link targets, HTML tags
NOT_PROSE = [re.compile(p, re.S) for p in
             (r"```.*?```", r"`[^`\n]*`", r"\$\$.*?\$\$", r"(?<!\\)\$[^$\n]+\$", r"\]\([^)]*\)", r"<[^>\n]+>")]


def twin(path: Path) -> Path:
    """The Chinese twin of an English notebook: DIR/NAME.ipynb -> DIR/zh/NAME.ipynb."""
    return path.parent / "zh" / path.name


def english_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (root / folder).glob("*.ipynb"))


class _Blank(ast.NodeTransformer):
    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(""), node) if isinstance(node.value, str) else node

    def visit_FormattedValue(self, node):
        node.value = self.visit(node.value)  # the format spec (":.2f") is code: kept as written
        return node


def _python(source: str) -> str:
    """A cell as plain Python (IPython magics become calls, as the kernel runs them)."""
    if not re.search(r"^\s*[%!]", source, re.M):
        return source
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)


def blanked(source: str) -> str:
    """The cell's syntax tree with comments gone and every string literal empty
    (IPython magic lines are kept word for word: their arguments are code)."""
    magics = [line.strip() for line in source.splitlines() if re.match(r"\s*[%!]", line)]
    return "\n".join([ast.dump(_Blank().visit(ast.parse(_python(source))))] + magics)


def prose(markdown: str) -> str:
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return markdown


def mostly_chinese(markdown: str) -> bool:
    """More CJK characters than Latin letters outside code, math, link targets and tags."""
    text = prose(markdown)
    latin = len(LATIN.findall(text))
    return latin == 0 or len(CJK.findall(text)) > latin


def _source(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _name(i: int, cell) -> str:
    first = next((line.strip() for line in _source(cell).splitlines() if line.strip()), "")
    return f"cell {i} (id {cell.get('id', '?')}, {cell.get('cell_type')}: {first[:60]!r})"


def compare(en: dict, zh: dict, where: str = "") -> list[str]:
    """Every way the Chinese notebook `zh` breaks parity with `en` (both nbformat dicts)."""
    head = f"{where}: " if where else ""
    problems = []
    ce, cz = en.get("cells", []), zh.get("cells", [])
    if len(ce) != len(cz):
        problems.append(f"{head}{len(ce)} cells in English, {len(cz)} in Chinese")
    if [c.get("id") for c in ce] != [c.get("id") for c in cz]:
        ids_en, ids_zh = [c.get("id") for c in ce], [c.get("id") for c in cz]
        extra, gone = [i for i in ids_zh if i not in ids_en], [i for i in ids_en if i not in ids_zh]
        problems.append(f"{head}cell ids differ (only in Chinese: {extra}, only in English: {gone}, "
                        "or an order change): add, drop and move cells in both editions")
        return problems  # pairing cells by position would only repeat the same news
    for i, (a, b) in enumerate(zip(ce, cz)):
        name = _name(i, a)
        if a.get("cell_type") != b.get("cell_type"):
            problems.append(f"{head}{name}: a {a.get('cell_type')} cell in English, {b.get('cell_type')} in Chinese")
            continue
        if a.get("metadata", {}) != b.get("metadata", {}):
            problems.append(f"{head}{name}: cell metadata differ ({a.get('metadata')} vs {b.get('metadata')})")
        if a.get("cell_type") == "code":
            sa, sb = _source(a), _source(b)
            try:
                same = blanked(sa) == blanked(sb)
            except SyntaxError as e:
                problems.append(f"{head}{name}: does not parse ({e.msg}, line {e.lineno})")
                continue
            if not same:
                problems.append(f"{head}{name}: the code differs between the editions (beyond comments and "
                                "string literals); change both")
            marks = lambda s: [line.strip() for line in s.splitlines() if line.strip() in MARKERS]
            if marks(sa) != marks(sb):
                problems.append(f"{head}{name}: the solution markers ({MARKERS[0]} / {MARKERS[1]}) differ")
        elif a.get("cell_type") == "markdown" and not mostly_chinese(_source(b)):
            text = prose(_source(b))
            problems.append(f"{head}{name}: the Chinese cell is not mostly Chinese "
                            f"({len(CJK.findall(text))} CJK characters, {len(LATIN.findall(text))} Latin letters)")
    return problems


def language_call(nb: dict) -> str | None:
    """The language the notebook's first code cell names with i18n.use(...), if any."""
    code = next((_source(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"), "")
    m = re.search(r"""i18n\.use\(\s*["']([a-z]+)["']\s*\)""", code)
    return m.group(1) if m else None


def check_pair(path: Path) -> list[str]:
    """Problems of the pair (English `path`, its twin), the twin's absence included."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    other = twin(path)
    if not other.exists():
        return [f"{rel}: the Chinese twin {twin(Path(rel)).as_posix()} is missing"]
    en, zh = (json.loads(p.read_text(encoding="utf-8")) for p in (path, other))
    problems = compare(en, zh, twin(Path(rel)).as_posix())
    if path.parent.name == "notebooks" and language_call(zh) != "zh":
        problems.append(f"{twin(Path(rel)).as_posix()}: the first code cell must call i18n.use(\"zh\")")
    return problems


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a).resolve() for a in args] or english_notebooks()
    problems = [p for path in paths for p in check_pair(path)]
    print("\n".join(problems) if problems else f"{len(paths)} notebook pairs in step")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
