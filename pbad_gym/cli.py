"""Command-line entry points: ``pbad-bench NAME [options]``."""
from __future__ import annotations

import argparse
import importlib
import sys

from .bench import BENCHMARKS


def bench_main(argv=None) -> int:
    """``pbad-bench NAME``: run one reproduced-figure benchmark (CSV + PNG under --out, table on stdout)."""
    parser = argparse.ArgumentParser(prog="pbad-bench", description="Reproduce the papers' benchmark figures.")
    sub = parser.add_subparsers(dest="name", required=True, metavar="NAME")
    modules = {}
    for name, modname in BENCHMARKS.items():
        mod = importlib.import_module(modname)
        modules[name] = mod
        p = sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0])
        p.add_argument("--out", default="results", help="results folder (default: results)")
        mod.add_arguments(p)
    args = parser.parse_args(argv)
    return int(modules[args.name].run(args) or 0)


if __name__ == "__main__":
    sys.exit(bench_main())
