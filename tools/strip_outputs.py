"""Strip outputs, execution counts and saved widget state from notebooks, in place.

    python tools/strip_outputs.py            # the course folders
    python tools/strip_outputs.py --check    # list notebooks that would change; exit 1 if any
    python tools/strip_outputs.py a.ipynb    # given files or folders

Plain json, no dependencies, so it also works as a pre-commit hook. The file is
written the way JupyterLab writes it (indent 1, sorted keys, one source line per item).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("notebooks", "exercises", "solutions", "tests/fixtures")
CELL_METADATA_DROP = ("execution", "collapsed", "scrolled", "ExecuteTime")


def strip(nb: dict) -> dict:
    """Return the notebook without outputs, execution counts and widget state."""
    nb = json.loads(json.dumps(nb))
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        md = cell.get("metadata", {})
        for key in CELL_METADATA_DROP:
            md.pop(key, None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
        src = cell.get("source")
        if isinstance(src, str):
            cell["source"] = src.splitlines(keepends=True)
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def notebooks(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb":
            found.append(p)
        elif not p.exists():
            raise SystemExit(f"strip_outputs: {p} does not exist")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="notebooks or folders (default: the course folders)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook would change")
    args = ap.parse_args(argv)
    paths = args.paths or [str(ROOT / f) for f in FOLDERS if (ROOT / f).exists()]
    dirty = []
    for path in notebooks(paths):
        text = path.read_text(encoding="utf-8")
        clean = dumps(strip(json.loads(text)))
        if clean != text:
            dirty.append(path)
            if not args.check:
                path.write_text(clean, encoding="utf-8")
    verb = "would change" if args.check else "stripped"
    for path in dirty:
        print(f"{verb}: {path}")
    return 1 if (args.check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main())
