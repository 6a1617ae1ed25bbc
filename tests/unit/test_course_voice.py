"""The course tells its story and states common claims as claims: no chapter, exercise or
message of the library speaks of the text the course was adapted from ("the seed", 原故事),
which its readers never see."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
META = re.compile(r"\b[Tt]he seed(?:'s| story| says| counts| demo)\b|\bseed (?:story|demo)\b|原故事|种子故事")
NOTEBOOKS = sorted(p for folder in ("notebooks", "exercises", "solutions") for p in (ROOT / folder).rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_chapter_speaks_of_the_source_text(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = [f"cell {c.get('id')}: ...{m.group(0)}..." for c in cells
             for m in META.finditer("".join(c["source"]) if isinstance(c["source"], list) else c["source"])]
    assert not found, f"{path.name} speaks of the text the course was adapted from: {found}; tell the story, " \
                      f"or state the claim as a common claim"


def test_no_library_message_speaks_of_it():
    po = (ROOT / "milktea" / "locale" / "zh_CN" / "LC_MESSAGES" / "milktea.po").read_text(encoding="utf-8")
    found = [line for line in po.splitlines() if not line.startswith("#") and META.search(line)]
    assert not found, found
    tests = [p for p in (ROOT / "solutions").rglob("*.tests.py")]
    assert not [p.name for p in tests if META.search(p.read_text(encoding="utf-8"))]


def test_the_pattern_catches_what_it_must():
    for text in ("The seed's demo", "the seed story ends", "原故事说", "as the seed says"):
        assert META.search(text), text
    for text in ("a shared seed", "seed=0", "three seeds", "the seed of the public checks", "random seed"):
        assert not META.search(text), text
