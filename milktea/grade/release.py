"""Make the student release from master notebooks: notebooks without solutions, public checks.

For every assignment in SOLUTIONS (NAME.ipynb with NAME.tests.py beside it, see assignment.py)
the release gets, in OUT (translated notebooks in OUT/zh/, which use the checks one folder up):

    NAME.ipynb          the master with every region between `### BEGIN SOLUTION` and
                        `### END SOLUTION` replaced by `raise NotImplementedError(...)` at the
                        same indentation, outputs dropped, `milktea.assignment` in its metadata;
                        every code cell from the first stub on is tagged `raises-exception`,
                        so that Run All (JupyterLab, nbclient) goes on past a task not done
                        yet, or a cell that tries it, down to the cell that checks the work
    NAME.checks.json    the public checks (public_checks.py): cases, expected outputs or their
                        hashes, the tests file without its hidden regions. No solution code.

    python -m milktea.grade release SOLUTIONS --out RELEASE [--assignment NAME] [--check]

`--check` writes nothing and exits 1 when OUT is out of date. Only these files are written;
nothing else in OUT is touched.

    >>> strip_solution("def f(x):\\n    ### BEGIN SOLUTION\\n    return x\\n    ### END SOLUTION\\n", "zh")
    'def f(x):\\n    # 在这里写你的代码\\n    raise NotImplementedError("请把这一行换成你的代码")\\n'
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys

from . import assignment, public_checks
from .assignment import SetupError
from .notebook import atomic_write, notebook_text

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
# the cell tag with which JupyterLab's Run All and nbclient go on after an error in the cell
GOES_ON = "raises-exception"
# the scaffold that replaces a solution region, in the notebook's language
STUBS = {"en": ("# YOUR CODE HERE", 'raise NotImplementedError("replace this line with your code")'),
         "zh": ("# 在这里写你的代码", 'raise NotImplementedError("请把这一行换成你的代码")')}


def strip_solution(source: str, lang: str = "en") -> str:
    """Replace every solution region by a stub; raises ValueError on unbalanced markers."""
    comment, stub = STUBS.get(lang, STUBS["en"])
    out, inside = [], False
    for n, line in enumerate(source.splitlines(True), 1):
        mark = line.strip()
        if mark == BEGIN:
            if inside:
                raise ValueError(f"line {n}: {BEGIN} inside another solution region")
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            out += [f"{indent}{comment}\n", f"{indent}{stub}\n"]
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


def exercise_from(solution: dict, lang: str = "en", name: str | None = None) -> dict:
    """The student notebook of a master; `lang` other than "en" is written into its metadata."""
    nb = copy.deepcopy(solution)
    stubbed = False
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"]
            cell["source"] = strip_solution(source, lang)
            cell["outputs"], cell["execution_count"] = [], None
            stubbed = stubbed or cell["source"] != source
            if stubbed and GOES_ON not in cell.get("metadata", {}).get("tags", []):
                cell.setdefault("metadata", {}).setdefault("tags", []).append(GOES_ON)
    meta = nb.setdefault("metadata", {}).setdefault("milktea", {})
    meta["role"] = "exercise"
    if name:
        meta["assignment"] = name
    if lang != "en":
        meta["lang"] = lang
    return nb


def files(a: assignment.Assignment, out: str) -> dict:
    """{path: text} of everything the release of one assignment holds."""
    written = {}
    for lang, nb in a.notebooks.items():
        folder = out if lang == a.lang else os.path.join(out, lang)
        try:
            student = exercise_from(nb, lang, a.name)
        except ValueError as e:
            raise SetupError(f"{a.master if lang == a.lang else lang + '/' + a.name}: {e}") from None
        written[os.path.join(folder, a.name + ".ipynb")] = notebook_text(student)
    # one checks file for every language: a translation in OUT/zh/ finds it one folder up
    written[os.path.join(out, a.name + public_checks.SUFFIX)] = public_checks.text(public_checks.build(a))
    return written


def _up_to_date(path: str, text: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except (OSError, UnicodeDecodeError):
        return False
    if current == text:
        return True
    if not path.endswith(public_checks.SUFFIX):
        return False
    try:   # float rounding may differ on another machine: the task's own comparison decides
        return public_checks.same(json.loads(current), json.loads(text), path)
    except (ValueError, KeyError, TypeError, SetupError):
        return False


def release(solutions: str, out: str, names=None, check: bool = False) -> tuple[list, list]:
    """Write (or, with `check`, only compare) the release; returns (paths, stale paths)."""
    src, dst = os.path.realpath(solutions), os.path.realpath(out)
    if dst == src or dst.startswith(src + os.sep):
        raise SetupError(f"--out {out} lies inside {solutions}: a release must live apart from the solutions")
    paths, stale = [], []
    for a in assignment.find(solutions, names).values():
        for path, text in files(a, out).items():
            paths.append(path)
            if _up_to_date(path, text):
                continue
            stale.append(path)
            if not check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                atomic_write(path, text)
    return paths, stale


def main(argv=None, prog: str = "python -m milktea.grade release", default_out: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Write the student release of master notebooks: "
                                 "notebooks without solutions, and their public checks.")
    ap.add_argument("solutions", nargs="?", default="solutions",
                    help="folder of master notebooks, each with NAME.tests.py beside it (default: solutions)")
    ap.add_argument("--out", default=default_out, required=default_out is None,
                    help="folder to write the release into" + (f" (default: {default_out})" if default_out else ""))
    ap.add_argument("--assignment", action="append", help="release only this assignment (repeat for several)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the release is out of date")
    args = ap.parse_args(argv)
    try:
        paths, stale = release(args.solutions, args.out, args.assignment, args.check)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(f"out of date (run {prog}): " + ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{len(paths)} files {'checked' if args.check else 'written'}"
          + (f", {len(stale)} changed" if stale else ", all up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
