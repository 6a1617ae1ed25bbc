"""Make the student notebooks from the solutions, so the two can never drift.

solutions/*.ipynb are the source. In each code cell, the lines between
`### BEGIN SOLUTION` and `### END SOLUTION` become `raise NotImplementedError(...)` at the
same indentation; outputs are dropped. The Chinese edition's solutions, solutions/zh/,
become exercises/zh/ the same way, marked `"milktea": {"lang": "zh"}` in their metadata so
that the checker and the class grader answer in Chinese. Run from the repository root:

    python -m milktea.grade.make_exercises           # write exercises/ and exercises/zh/
    python -m milktea.grade.make_exercises --check   # exit 1 if either is out of date
"""
from __future__ import annotations

import argparse
import copy
import glob
import os
import sys

from .notebook import atomic_write, notebook_text, read_notebook

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotImplementedError("replace this line with your code")'


def strip_solution(source: str) -> str:
    """Replace every solution region by a stub; raises ValueError on unbalanced markers."""
    out, inside = [], False
    for n, line in enumerate(source.splitlines(True), 1):
        mark = line.strip()
        if mark == BEGIN:
            if inside:
                raise ValueError(f"line {n}: {BEGIN} inside another solution region")
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            out += [f"{indent}# YOUR CODE HERE\n", f"{indent}{STUB}\n"]
        elif mark == END:
            if not inside:
                raise ValueError(f"line {n}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN} is never closed")
    text = "".join(out)
    return text if source.endswith("\n") else text.rstrip("\n")


def exercise_from(solution: dict, lang: str = "en") -> dict:
    """The student notebook of `solution`; `lang` other than "en" is written into its metadata."""
    nb = copy.deepcopy(solution)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = strip_solution(cell["source"])
            cell["outputs"], cell["execution_count"] = [], None
    meta = nb.setdefault("metadata", {}).setdefault("milktea", {})
    meta["role"] = "exercise"
    if lang != "en":
        meta["lang"] = lang
    return nb


# (solutions folder, exercises folder, language): the English edition and its translations
def editions(solutions: str, exercises: str) -> list[tuple[str, str, str]]:
    return [(solutions, exercises, "en"), (os.path.join(solutions, "zh"), os.path.join(exercises, "zh"), "zh")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade.make_exercises", description=__doc__.split("\n")[0])
    ap.add_argument("--solutions", default="solutions")
    ap.add_argument("--exercises", default="exercises")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when exercises/ is out of date")
    args = ap.parse_args(argv)
    jobs = [(path, os.path.join(out, os.path.basename(path)), lang) for src, out, lang in
            editions(args.solutions, args.exercises) for path in sorted(glob.glob(os.path.join(src, "*.ipynb")))]
    if not any(lang == "en" for _, _, lang in jobs):
        print(f"no notebooks in {args.solutions}/ (run from the repository root)", file=sys.stderr)
        return 2
    stale = []
    for path, target, lang in jobs:
        try:
            text = notebook_text(exercise_from(read_notebook(path), lang))
        except ValueError as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        current = None
        if os.path.exists(target):
            with open(target, encoding="utf-8") as f:
                current = f.read()
        if current == text:
            continue
        stale.append(target)
        if not args.check:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            atomic_write(target, text)
    if args.check and stale:
        print("out of date (run python -m milktea.grade.make_exercises): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{len(jobs)} exercise notebooks {'checked' if args.check else 'written'}"
          + (f", {len(stale)} changed" if stale else ", all up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
