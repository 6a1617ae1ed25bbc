"""The class autograder: out of process, limited, plain data in and out.

    python -m milktea.grade.check 03_topk.ipynb             # a learner checks a notebook
    python -m milktea.grade SUBMISSIONS --out GRADES         # an instructor grades a class

Student code never runs in the grader's process: `sandbox.run` starts a child (child.py)
with resource limits and an audit hook, feeds it the cases, and gets plain JSON back;
`evaluate` compares with the reference computed here from the solution notebooks.
"""
from .check import check
from .classroom import grade_class
from .sandbox import Limits
from .spec import Case

__all__ = ["check", "grade_class", "Limits", "Case"]
