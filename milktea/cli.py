"""What the command lines share: one line per error, a "did you mean" for names, and
`--import` of a user's own module (a compressor registered as a scheme in a file of yours).

    >>> did_you_mean("int9", ["dense", "topk", "int8", "int4"])
    " (did you mean 'int8'?)"
    >>> unknown("scheme", "top-k", ["dense", "topk"])
    "unknown scheme 'top-k' (did you mean 'topk'?); choose from dense, topk"
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys


def did_you_mean(name, choices) -> str:
    """' (did you mean 'x'?)' for the choice closest to `name`, or '' when none is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, name, choices) -> str:
    """The message for a name that is not among `choices`: the closest, then every choice."""
    return f"unknown {kind} {name!r}{did_you_mean(name, choices)}; choose from {', '.join(map(str, choices))}"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `prog: error: what to change`, and exit 2
    (argparse's own print the whole usage first, which for a long command hides the line)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def fail(prog: str, error: BaseException) -> None:
    """Leave a command line with the one line that says what to change (exit status 2)."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    raise SystemExit(2)


def add_import_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="import this module first (a dotted name, or a path to a .py file; repeat for "
                         "several): what it registers with milktea.distributed.schemes.register becomes a "
                         "scheme here and in every worker process (default: none)")


def import_modules(specs) -> list[str]:
    """Import each of `specs` (a module name, or a path to a .py file whose folder is then put
    on sys.path, which worker processes started later inherit); return the module names.
    ValueError, saying what to give instead, when one cannot be imported."""
    names = []
    for spec in specs:
        name = spec
        if spec.endswith(".py") or os.sep in spec:
            path = os.path.abspath(spec)
            if not os.path.isfile(path):
                raise ValueError(f"--import {spec}: no such file; give a module name importable from here or "
                                 f"the path of a .py file")
            folder, name = os.path.split(path)
            name = name[:-3] if name.endswith(".py") else name
            if folder not in sys.path:
                sys.path.insert(0, folder)
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"--import {spec}: cannot import it ({type(e).__name__}: {e}); give a module name "
                             f"importable from here or the path of a .py file") from e
        names.append(name)
    return names
