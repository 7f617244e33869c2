"""Compile kernel families for this machine's GPU into CuPy's disk cache, several at once.

    python3 -m kosmos.runtime.warm [--jobs N] [FILE.hip ...]

A call compiles its module the first time it needs it, one module at a time and on the caller's
clock: on a fresh machine the fused MoE kernels took over 100 s of NVRTC (an H100 host, session
26; one file then), so a first test or benchmark can spend its time limit compiling. This
compiles the named files (default: every hipsrc/*.hip, the most source first) beforehand, each in
its own process (default: as many at once as CPU cores), with the options load_module uses (the
current device's target; the tree in $KOSMOS_HIPSRC or the checkout, whose digest is in the
options), so later loads of the same tree hit the cache.
Prints each file's compile time; a file that fails to compile is named and the exit code is 1.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Sequence

from .source import hipsrc_dir, kernel_files


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_bytes(path: Path, seen: set[Path] | None = None) -> int:
    """Bytes a compile of `path` reads: the file and every header it includes with quotes, each
    once (a kernel file of a few lines can pull in most of the tree: the fused MoE kernels)."""
    seen = set() if seen is None else seen
    path = path.resolve()
    if path in seen or not path.is_file():
        return 0
    seen.add(path)
    text = path.read_text()
    return len(text.encode()) + sum(source_bytes(path.parent / inc, seen) for inc in _INCLUDE.findall(text))


def files_to_warm(names: Sequence[str]) -> list[str]:
    """The kernel files to compile: `names` (each must be a hipsrc/*.hip file), or every one; the
    most source first (source_bytes), so the longest compiles start first."""
    known = {f.name: source_bytes(f) for f in kernel_files()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"not kernel files under {hipsrc_dir()}: {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(known))})")
    chosen = list(dict.fromkeys(names)) if names else list(known)
    return sorted(chosen, key=lambda n: -known[n])


def compile_one(name: str) -> float:
    """Compile hipsrc/<name> for the current device into CuPy's cache; returns seconds taken."""
    from .module import load_module

    t0 = time.perf_counter()
    load_module(name)
    return time.perf_counter() - t0


def warm(names: Sequence[str], jobs: int, compile_fn: Callable[[str], float] = compile_one,
         echo: Callable[[str], None] = print) -> list[str]:
    """Compile `names` with `jobs` processes (1: in this process); returns the files that failed."""
    failed: list[str] = []

    def report(name: str, seconds: float | None, error: BaseException | None) -> None:
        if error is None:
            echo(f"ok   {name:24s} {seconds:7.1f} s")
        else:
            failed.append(name)
            echo(f"FAIL {name}: {type(error).__name__}: {error}")

    if jobs <= 1:
        for n in names:
            try:
                report(n, compile_fn(n), None)
            except Exception as e:  # noqa: BLE001 - reported, and the exit code says so
                report(n, None, e)
        return failed
    # spawn: a forked child would inherit this process's CUDA state, which CUDA does not allow
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(compile_fn, n): n for n in names}
        for f in as_completed(futures):
            err = f.exception()
            report(futures[f], None if err else f.result(), err)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", metavar="FILE.hip", help="kernel files under hipsrc/ (default: all)")
    ap.add_argument("--jobs", type=int, default=0,
                    help="compiles at once (default: one per CPU core, at most one per file; 1: in this process)")
    args = ap.parse_args(argv)
    try:
        names = files_to_warm(args.files)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    jobs = args.jobs or max(1, min(len(names), os.cpu_count() or 8))  # NVRTC runs one thread a compile
    t0 = time.perf_counter()
    print(f"compiling {len(names)} kernel files from {hipsrc_dir()}, {jobs} at once", flush=True)
    failed = warm(names, jobs, echo=lambda s: print(s, flush=True))
    print(f"{len(names) - len(failed)} compiled, {len(failed)} failed, {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
