"""No path of the grader's machine leaves a child: every text a child sends is scrubbed here.

A child can see some of the grader's paths (the Python installation is mounted in its world at
its real path; a frame of child.py or a traceback through numpy names it), and in a run without
a sandbox it could find the others. Rather than trusting each message not to carry one, the
parent replaces every such path in everything that crosses from a child (messages, the line
that raised, printed output, strings inside returned values) before it is stored or compared:
the folders the instructor passed (solutions, hidden tests, submissions, --out), the Python
installation (venv, base interpreter, site-packages) and the grader's own code, each by a
placeholder, longest first. Paths shorter than two folders (/usr, /tmp) are left alone.

    >>> s = Scrubber({"/home/ta/hw": "<solutions>", "/opt/venv": "<python>"})
    >>> s("open('/home/ta/hw/hw3.tests.py') in /opt/venv/lib/x.py")
    "open('<solutions>/hw3.tests.py') in <python>/lib/x.py"
"""
from __future__ import annotations

import os
import re
import site
import sys
import sysconfig

import numpy as np

_GENERIC = {"/usr", "/usr/lib", "/usr/local", "/usr/local/lib", "/usr/lib64", "/tmp", "/var/tmp", "/lib",
            "/lib64", "/etc", "/opt", "/home", "/root", "/proc", "/dev"}


class Scrubber:
    """`scrubber(text)`: text with every known path replaced by its placeholder."""

    def __init__(self, paths: dict):
        keep = {}
        for path, label in paths.items():
            for p in {os.path.abspath(path), os.path.realpath(path)}:
                p = p.rstrip("/")
                if p.count("/") >= 2 and p not in _GENERIC:
                    keep.setdefault(p, label)
        self.paths = keep
        alternatives = sorted(keep, key=len, reverse=True)
        self._re = re.compile("|".join(re.escape(p) for p in alternatives)) if alternatives else None

    def __call__(self, text: str) -> str:
        if self._re is None or not isinstance(text, str):
            return text
        return self._re.sub(lambda m: self.paths[m.group(0)], text)

    def value(self, v, depth: int = 0):
        """A decoded result with every string in it scrubbed (arrays are numbers: left as they are)."""
        if isinstance(v, str):
            return self(v)
        if depth > 40 or isinstance(v, (np.ndarray, bytes, int, float, bool)) or v is None:
            return v
        if isinstance(v, list):
            return [self.value(x, depth + 1) for x in v]
        if isinstance(v, tuple):
            return tuple(self.value(x, depth + 1) for x in v)
        if isinstance(v, dict):
            return {self(k) if isinstance(k, str) else k: self.value(x, depth + 1) for k, x in v.items()}
        return v


def _python() -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    out = {os.path.dirname(os.path.dirname(here)): "<grader>", os.path.dirname(here): "<grader>"}
    for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))):
        out[p] = "<python>"
    for p in list(sysconfig.get_paths().values()) + list(getattr(site, "getsitepackages", list)()) + [
            p for p in sys.path if p.endswith("-packages")]:
        out.setdefault(p, "<python>")
    return out


def for_run(deny=()) -> Scrubber:
    """The scrubber of a grading run: the instructor's folders `deny` and this machine's Python."""
    labels = _python()
    labels.update({p: "<instructor's folder>" for p in deny if p})
    return Scrubber(labels)


def tail(raw: bytes, scrubber, limit: int = 8192) -> str:
    """The last `limit` characters of printed output, scrubbed before it is cut (a path split by
    the cut could not be recognised) and cut at a line start."""
    text = scrubber(raw.decode("utf-8", "replace"))
    if len(text) > limit:
        text = text[-limit:]
        text = text.partition("\n")[2] if "\n" in text else ""
    return text
