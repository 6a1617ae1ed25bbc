"""Build the Chinese font the library ships: subsets of Noto Sans CJK SC Regular and Bold (SIL OFL 1.1).

Figures in the Chinese edition need glyphs on a machine that has no CJK font, so the library
ships one (milktea/fonts/), in two weights (bold text, such as a figure's box labels, needs
its own glyphs, or matplotlib falls back to the regular ones and says so): only the
characters the project's Chinese text uses, renamed "Milktea Sans SC" so that it never
shadows a full Noto font installed on the system. Which
characters: every character of the Chinese notebooks (notebooks/zh, exercises/zh,
solutions/zh), the library's catalog, the glossary, the Chinese README, any Chinese literal
in milktea/ (the grader), printable ASCII and the common full-width punctuation, plus
JupyterLab's own Chinese menus where the language pack is installed (for `make lab-zh`).
tests/unit/test_cjk_font.py fails when Chinese text uses a character the font lacks; then run

    python tools/cjk_font.py            # fetches Debian's fonts-noto-cjk (apt-get download), rebuilds
    python tools/cjk_font.py --source DIR   # or from a folder holding NotoSansCJK-{Regular,Bold}.ttc

fontTools (a matplotlib dependency) does the subsetting; this script is needed only when
the text changes, never at run time.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FONTS = ROOT / "milktea" / "fonts"
WEIGHTS = ("Regular", "Bold")   # MilkteaSansSC-<weight>.otf from NotoSansCJK-<weight>.ttc
FAMILY = "Milktea Sans SC"
SOURCE_FACE = "Noto Sans CJK SC"  # the face inside Debian's NotoSansCJK-<weight>.ttc
DEBIAN_PACKAGE = "fonts-noto-cjk"
DEBIAN_FOLDER = "usr/share/fonts/opentype/noto"

# Full-width and CJK punctuation a Chinese sentence may use, whether or not it does today.
PUNCTUATION = "，。、；：？！“”‘’（）《》〈〉【】「」『』…—～·￥％＋－＝／　"
CJK = re.compile(r"[^\x00-\x7f]")


def _notebook_text(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def _catalog_text(path: Path) -> str:
    from babel.messages.pofile import read_po
    with open(path, "rb") as f:
        return "\n".join(s for m in read_po(f) for s in
                         (m.string if isinstance(m.string, (list, tuple)) else [m.string]) if s)


def _python_literals(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return "\n".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def course_texts(root: Path = ROOT) -> dict[str, str]:
    """Every Chinese text the project ships, by file (what the font must cover)."""
    texts = {}
    for folder in ("notebooks/zh", "exercises/zh", "solutions/zh"):
        for path in sorted((root / folder).glob("*.ipynb")):
            texts[path.relative_to(root).as_posix()] = _notebook_text(path)
    for path in sorted((root / "milktea" / "locale").glob("*/LC_MESSAGES/*.po")):
        texts[path.relative_to(root).as_posix()] = _catalog_text(path)
    for name in ("docs/glossary.zh.md", "README.zh-CN.md"):
        if (root / name).exists():
            texts[name] = (root / name).read_text(encoding="utf-8")
    for path in sorted((root / "milktea").rglob("*.py")):
        text = _python_literals(path)
        if CJK.search(text):
            texts[path.relative_to(root).as_posix()] = text
    return texts


def lab_texts() -> dict[str, str]:
    """JupyterLab's Chinese menus and widget labels, where the language pack is installed."""
    try:
        import jupyterlab_language_pack_zh_CN as pack
    except ImportError:
        return {}
    folder = Path(pack.__file__).parent / "locale" / "zh_CN" / "LC_MESSAGES"
    return {p.name: json.dumps(json.loads(p.read_text(encoding="utf-8")), ensure_ascii=False)
            for p in (folder / "jupyterlab.json", folder / "jupyterlab_widgets.json") if p.exists()}


def characters(texts) -> set[str]:
    """The characters a Chinese reader may see: the non-ASCII ones of `texts` (not controls,
    not the private-use area), printable ASCII and the punctuation above."""
    chars = {c for text in texts for c in CJK.findall(text)} | set(PUNCTUATION)
    chars |= {chr(i) for i in range(0x20, 0x7f)}
    return {c for c in chars if c.isprintable() and not 0xE000 <= ord(c) <= 0xF8FF}


def fetch_source(folder: Path) -> Path:
    """Debian's fonts-noto-cjk, downloaded with apt-get and unpacked into `folder`; the folder of its .ttc files."""
    subprocess.run(["apt-get", "download", DEBIAN_PACKAGE], cwd=folder, check=True)
    deb = next(Path(folder).glob(f"{DEBIAN_PACKAGE}_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(folder / "x")], check=True)
    return folder / "x" / DEBIAN_FOLDER


def out_path(weight: str) -> Path:
    return FONTS / f"{FAMILY.replace(' ', '')}-{weight}.otf"


def build(source: Path, chars: set[str], out: Path, weight: str = "Regular") -> int:
    """Subset `source` (a .ttc holding SOURCE_FACE, or one .otf) to `chars`; write `out`."""
    from fontTools import subset
    from fontTools.ttLib import TTCollection, TTFont

    if source.suffix.lower() == ".ttc":
        faces = TTCollection(str(source)).fonts
        font = next(f for f in faces if f["name"].getDebugName(1) == SOURCE_FACE)
    else:
        font = TTFont(str(source))
    options = subset.Options()
    options.layout_features = []  # horizontal text only: no vertical forms, no ligatures
    options.drop_tables += ["GSUB", "GPOS", "BASE", "VORG", "vhea", "vmtx", "DSIG"]
    options.hinting = False  # matplotlib and browsers auto-hint; the hints were 15% of the file
    options.desubroutinize = True  # a little smaller once subset
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]  # keep copyright and licence
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes={ord(c) for c in chars})
    subsetter.subset(font)
    _rename(font, weight)
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out))
    return out.stat().st_size


def _rename(font, weight: str = "Regular") -> None:
    """OFL: a modified font takes its own name (family, full name, PostScript name); the
    weight (style name, and OS/2's weight class from the source) says Regular or Bold."""
    names = {1: FAMILY, 2: weight, 3: f"{FAMILY.replace(' ', '')}-{weight};subset of {SOURCE_FACE}",
             4: f"{FAMILY} {weight}", 6: f"{FAMILY.replace(' ', '')}-{weight}", 16: FAMILY, 17: weight}
    table = font["name"]
    for rec in list(table.names):
        if rec.nameID in (16, 17) or rec.langID not in (0x409, 0):
            table.removeNames(nameID=rec.nameID, platformID=rec.platformID, langID=rec.langID)
    for name_id, value in names.items():
        if name_id in (16, 17):
            continue
        table.setName(value, name_id, 3, 1, 0x409)
        table.setName(value, name_id, 1, 0, 0)
    if "CFF " in font:
        cff = font["CFF "].cff
        cff.fontNames = [names[6]]
        top = cff[cff.fontNames[0]]
        top.FullName, top.FamilyName = names[4], FAMILY


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="folder holding NotoSansCJK-{Regular,Bold}.ttc "
                                                      "(default: apt-get download)")
    args = parser.parse_args(argv)
    chars = characters([*course_texts().values(), *lab_texts().values()])
    with tempfile.TemporaryDirectory() as tmp:
        source = args.source or fetch_source(Path(tmp))
        for weight in WEIGHTS:
            out = out_path(weight)
            size = build(source / f"NotoSansCJK-{weight}.ttc", chars, out, weight)
            print(f"{out.relative_to(ROOT)}: {len(chars)} characters, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
