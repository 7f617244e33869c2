"""What the benchmarks share: their timing arguments, the world check, the results file."""
from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Iterator

from kosmos import World
from kosmos.timing import check_timeable, device_name, git_commit

RESULTS = Path(__file__).resolve().parent / "results"
TIMING = "kosmos.timing.time_calls (events behind the stream blocker, contenders interleaved, median)"


def add_timing_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tag", default="")


@contextlib.contextmanager
def one_gpu(script: str) -> Iterator[tuple[World, str]]:
    """(world, commit) for a benchmark that times one GPU; refuses mpirun and oversubscription."""
    with World() as world:
        check_timeable(world)
        if world.size != 1:
            raise SystemExit(f"{script} times one GPU: run it without mpirun (world size 1)")
        commit = git_commit()
        print(f"{script}: {device_name()}, commit {commit}, world 1", flush=True)
        yield world, commit


@contextlib.contextmanager
def gpu_per_rank(script: str) -> Iterator[tuple[World, str]]:
    """(world, commit) for a benchmark that runs at any world size, one GPU per rank (mpirun -np P);
    refuses oversubscription. Only rank 0 should print and write results (the timings are the
    slowest rank's)."""
    with World() as world:
        check_timeable(world)
        commit = git_commit()
        if world.rank == 0:
            print(f"{script}: {device_name()}, commit {commit}, world {world.size}", flush=True)
        yield world, commit


def write_results(args: argparse.Namespace, prefix: str, commit: str, results: list, world: int = 1,
                  **extra) -> Path:
    """bench/results/<prefix>_<GPU>_<date>[_tag].json with GPU, world, commit, timing method; returns
    the path without its suffix (for a PNG beside it)."""
    args.out.mkdir(parents=True, exist_ok=True)
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    stem = args.out / f"{prefix}_{device_name().replace(' ', '_')}_{date}{('_' + args.tag) if args.tag else ''}"
    doc = {"gpu": device_name(), "world": world, "commit": commit, "date": date, "iters": args.iters,
           "warmup": args.warmup, "timing": TIMING, **extra, "results": results}
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    return stem
