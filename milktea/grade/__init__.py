"""The class autograder: out of process, limited, plain data in and out.

    python -m milktea.grade.check 03_topk.ipynb             # a learner checks a notebook
    python -m milktea.grade SUBMISSIONS --out GRADES         # an instructor grades a class

Student code never runs in the grader's process: `sandbox.run` starts a child (child.py) in a
world built by the kernel (isolation.py: bubblewrap namespaces, an unprivileged uid, only the
Python installation mounted) with resource limits, feeds it the cases, and gets plain JSON
back; `evaluate` compares with the reference computed here from the solution notebooks.
"""
from .sandbox import Limits
from .spec import Case

__all__ = ["check_notebook", "grade_class", "Limits", "Case"]


def __getattr__(name):   # lazy, so `python -m milktea.grade.check` doesn't import itself twice
    if name == "check_notebook":
        from .check import check_notebook
        return check_notebook
    if name == "grade_class":
        from .classroom import grade_class
        return grade_class
    raise AttributeError(f"module 'milktea.grade' has no attribute {name!r}")
