"""The cells a learner runs around the graded ones (the examples after each task, the given
helpers, 04.4's buggy loop) work with the master's answers, in both editions. The grader runs
only the graded cells, so nothing else would notice a broken example. The last cell, the
checker, is left out (it starts a process: tests/course/test_grade_exercises.py runs it)."""
import contextlib
import io

import pytest

from _grade_helpers import CHAPTERS, SOLUTIONS
from milktea.grade.notebook import read_notebook


MASTERS = [SOLUTIONS / f"{ch}.ipynb" for ch in CHAPTERS] + [SOLUTIONS / "zh" / f"{ch}.ipynb" for ch in CHAPTERS]


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.relative_to(SOLUTIONS).as_posix())
def test_every_cell_of_the_master_runs(path):
    import matplotlib.pyplot as plt
    cells = [c for c in read_notebook(str(path))["cells"] if c["cell_type"] == "code"]
    assert "milktea.grade.check" in cells[-1]["source"], "the last cell should run the checker"
    ns = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for cell in cells[:-1]:
            exec(compile(cell["source"], f"{path.name}:{cell.get('id')}", "exec"), ns)
    plt.close("all")
    assert out.getvalue().strip(), "the examples print what they show"
