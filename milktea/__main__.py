"""`python -m milktea <command> [args]`.

Each command is "module:function" plus a one-line help; the module is imported only
when its command runs, so `doctor` works even where a heavier part cannot import.
The function takes the remaining arguments (a list of str) and returns an exit code.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("milktea.__main__:doctor", "versions, CUDA/NCCL/gloo, chosen device, cores, widgets, grading isolation"),
    "compare": ("milktea.distributed.compare_cli:main", "train one model on one link with every gradient-sending scheme"),
}


def doctor(argv: list[str]) -> int:
    """The environment report (milktea.device), then whether the class grader can isolate
    student code here (milktea.grade.isolation)."""
    from milktea.device import doctor as report
    code = report(argv)
    if "--json" not in argv:
        from milktea.grade.isolation import probe, tools
        print(f"grading isolation: {probe().describe()}")
        for line in tools():
            print(f"  {line}")
    return code


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: python -m milktea <command> [args]\n\ncommands:\n{rows}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        from milktea.cli import unknown
        print(f"python -m milktea: error: {unknown('command', name, COMMANDS)} (see python -m milktea --help)",
              file=sys.stderr)
        return 2
    module, func = COMMANDS[name][0].split(":")
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
