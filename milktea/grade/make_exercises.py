"""Make the course's student notebooks and public checks from its master notebooks.

The course's six exercises are assignments like any instructor's (see release.py): the masters
are solutions/NAME.ipynb with solutions/NAME.tests.py, the Chinese masters solutions/zh/, and
the release is exercises/ (and exercises/zh/). Run from the repository root:

    python -m milktea.grade.make_exercises           # write exercises/ and exercises/zh/
    python -m milktea.grade.make_exercises --check   # exit 1 if either is out of date
"""
from __future__ import annotations

import argparse
import sys

from . import release
from .release import BEGIN, END, exercise_from, strip_solution

__all__ = ["BEGIN", "END", "exercise_from", "strip_solution", "main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade.make_exercises", description=__doc__.split("\n")[0])
    ap.add_argument("--solutions", default="solutions")
    ap.add_argument("--exercises", default="exercises")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when exercises/ is out of date")
    args = ap.parse_args(argv)
    return release.main([args.solutions, "--out", args.exercises] + (["--check"] if args.check else []),
                        prog="python -m milktea.grade.make_exercises")


if __name__ == "__main__":
    sys.exit(main())
