"""`python -m milktea compare`: the command line of `milktea.distributed.compare.compare`.

Every setting is checked before a process starts, and a wrong one ends in one line that
says what to change (a "did you mean" for a scheme's or a task's name). `--import MODULE`
imports a module of yours first: the schemes it registers (`schemes.register("mine",
MyCompressor())`) can then be named in `--schemes`, and the worker processes get them too.

    python -m milktea compare --import my_codec.py --schemes dense,mine --steps 20
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

from milktea.checks import check_number
from milktea.distributed import schemes


def build_parser() -> argparse.ArgumentParser:
    from milktea.cli import Parser, add_import_argument
    from milktea.distributed.compare import COMPARE_DEFAULTS
    from milktea.distributed.train import TrainConfig, add_config_arguments, add_run_arguments
    ap = Parser(prog="python -m milktea compare", allow_abbrev=False,
                description="Train one model on one link with every gradient-sending scheme.")
    ap.add_argument("--schemes", default=",".join(schemes.COMPARE_DEFAULT),
                    help=f"comma-separated, from: {', '.join(schemes.SCHEMES)} and those an --import "
                         f"registers (default: {','.join(schemes.COMPARE_DEFAULT)})")
    add_config_arguments(ap, TrainConfig(**COMPARE_DEFAULTS), skip=("scheme",))
    add_run_arguments(ap)
    ap.add_argument("--loopback", action="store_true", help="no emulation: the real (fast) link")
    ap.add_argument("--netns", type=float, default=None, metavar="GBIT",
                    help="a real tc-shaped link of GBIT Gbit/s between network namespaces, as root "
                         "(default: none)")
    ap.add_argument("--out", default="results/compare",
                    help="folder for results.jsonl, summary.json, plots (default: results/compare)")
    ap.add_argument("--sequential", action="store_true",
                    help="one scheme after another, not in turns (in turns when the models fit in memory)")
    ap.add_argument("--no-plots", action="store_true", help="write no figures")
    ap.add_argument("--no-progress", action="store_true", help="show no progress bar")
    add_import_argument(ap)
    return ap


def parse(argv: list[str] | None = None):
    """(scheme names, TrainConfig, the parsed options), every setting checked and every
    --import imported; a wrong setting leaves with one line and exit status 2."""
    from milktea.cli import fail, import_modules
    from milktea.distributed.compare import check_names
    from milktea.distributed.train import check_run_arguments, config_from_arguments
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        import_modules(a.imports)
        names = check_names(s.strip() for s in a.schemes.split(",") if s.strip())
        config = config_from_arguments(a)
        if a.loopback or a.netns is not None:
            config = dataclasses.replace(config, link_gbit=None)
        if a.netns is not None:
            check_number(a.netns, "--netns", 0, open_low=True)
        check_run_arguments(a)
    except (TypeError, ValueError) as e:
        fail(ap.prog, e)
    return names, config, a


def main(argv: list[str] | None = None) -> None:
    names, config, a = parse(argv)
    from milktea.distributed.compare import compare
    res = compare(names, config, workers=a.workers, netns_gbit=a.netns,
                  interleave=False if a.sequential else None, progress=not a.no_progress, stall_timeout=a.timeout)
    print(res.table())
    paths = res.save(a.out, plots=not a.no_plots)
    print("wrote " + ", ".join(paths), file=sys.stderr)


if __name__ == "__main__":
    main()
