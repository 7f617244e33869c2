"""`python -m kosmos` (also the `kosmos` command).

    kosmos info      # what this machine has for kosmos, and the fix for each missing piece
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kosmos", description="kosmos: fused communication + GEMM kernels (CuPy + MPI)")
    sub = ap.add_subparsers(dest="command")
    sub.add_parser("info", help="report the GPUs, libraries, MPI and compilers kosmos uses, with fixes")
    args = ap.parse_args(argv)
    if args.command == "info":
        from .environment import format_report, report

        print(format_report(report()))
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
