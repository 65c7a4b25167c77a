"""``python -m labkit.cuda run [--check MODES] prog.cu [more sources...] [--] [args...]``

Builds a whole CUDA program for the CPU executor and runs it; its output and exit status are the
program's.  The leading arguments that are source files (.cu, .cpp, ...) or folders of them are the
program; the rest (or everything after ``--``) are its arguments.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import KernelCompileError, UnsupportedOnCPU
from . import CHECKS, run_program

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def split_sources(items: list[str]) -> tuple[list[str], list[str]]:
    """(sources, program arguments) of the command line after the options."""
    sources: list[str] = []
    for i, a in enumerate(items):
        if a == "--":
            return sources, items[i + 1:]
        if (a.endswith(SOURCE_SUFFIXES) and os.path.isfile(a)) or (not sources and os.path.isdir(a)):
            sources.append(a)
        else:
            return sources, items[i:]
    return sources, []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.cuda",
                                     description="Whole CUDA programs on labkit's CPU executor")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="build a program and run it")
    r.add_argument("--check", default=None,
                   help=f"checking modes, separated by commas: {', '.join(CHECKS)}, or all")
    r.add_argument("--timeout", type=float, default=None, help="stop the program after this many seconds")
    r.add_argument("items", nargs=argparse.REMAINDER, help="source files or a folder, then the program's arguments")
    ns = parser.parse_args(argv)
    sources, args = split_sources(ns.items)
    if not sources:
        if args and args[0].endswith(SOURCE_SUFFIXES):
            parser.error(f"{args[0]}: no such file")
        parser.error("give the program's source file (prog.cu), or a folder of its sources")
    try:
        # Without a check the program prints as it runs; a check's report is written after the run.
        rc, out, err = run_program(sources, args, check=ns.check, timeout=ns.timeout, live=not ns.check)
    except (UnsupportedOnCPU, KernelCompileError, FileNotFoundError, ValueError) as e:
        print(f"labkit: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
