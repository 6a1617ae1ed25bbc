"""The task table of a folder of assignments, as Markdown: what docs/grading.md shows for the
course, made from the masters and their tests files (never typed in by hand).

    python -m milktea.grade tasks [SOLUTIONS]

prints one row per task: the assignment, its id, its title (the heading above its cell), the
function a learner writes, its points, and the Gradescope visibility of its hidden tests.
"""
from __future__ import annotations

import argparse
import sys

from . import assignment
from .assignment import SetupError


def markdown(folder: str) -> str:
    """| assignment | task | title | you write | points | hidden tests shown | rows, one per task."""
    rows = ["| assignment | task | title | you write | points | hidden tests shown |", "|---|---|---|---|---|---|"]
    for name, a in assignment.find(folder).items():
        for t in a.tasks:
            hidden = t.visibility.replace("_", " ") if (t.id in a.hidden) else "-"
            rows.append(f"| `{name}` | {t.id} | {a.title(t.id)} | `{t.function}` | {t.points:g} | {hidden} |")
        rows.append(f"| `{name}` | | **total** | | **{a.points:g}** | |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m milktea.grade tasks",
                                 description="Print the task table of a folder of assignments, in Markdown.")
    ap.add_argument("solutions", nargs="?", default="solutions",
                    help="folder of master notebooks, each with NAME.tests.py beside it (default: solutions)")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(markdown(args.solutions))
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
