"""Command-line entry points: ``pbad-bench NAME [options]``."""
from __future__ import annotations

import argparse
import importlib
import sys

from .bench import BENCHMARKS


def bench_main(argv=None) -> int:
    """``pbad-bench NAME``: run one reproduced-figure benchmark (CSV + PNG under --out, table on stdout).

    Only the chosen benchmark's module is imported, so one benchmark's optional dependencies never break another.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    top = argparse.ArgumentParser(prog="pbad-bench", description="Reproduce the papers' benchmark figures.")
    top.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(sorted(BENCHMARKS)))
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        top.parse_args(argv[:1] or ["--help"])
    mod = importlib.import_module(BENCHMARKS[argv[0]])
    parser = argparse.ArgumentParser(prog=f"pbad-bench {argv[0]}", description=(mod.__doc__ or "").strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results", help="results folder (default: results)")
    mod.add_arguments(parser)
    return int(mod.run(parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(bench_main())
