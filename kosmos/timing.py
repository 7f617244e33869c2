"""Timing protocol shared by the demo and the benchmarks (the paper's Section 4.1.3).

Warm-up, then timed iterations with device events around each call, the median per rank,
and the slowest rank's median as the result. Refuses to time an oversubscribed world unless
told to, since ranks sharing a GPU time-slice and the numbers mean nothing.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

from .errors import KosmosError
from .world import World


@dataclass(frozen=True)
class Timing:
    median_ms: float  # slowest rank's median
    min_ms: float     # slowest rank's fastest iteration
    iters: int


def device_name() -> str:
    import cupy

    if cupy.cuda.runtime.is_hip:
        return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["gcnArchName"].decode()
    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()


def check_timeable(world: World, allow_oversubscribed: bool = False) -> None:
    if world.oversubscribed and not allow_oversubscribed:
        raise KosmosError(
            f"{world.local_size} ranks share {world.num_gpus} GPU(s): they time-slice, so timings are "
            "meaningless; run one rank per GPU (or pass --allow-oversubscribed to time anyway)"
        )


def time_call(world: World, fn: Callable[[int], Any], warmup: int = 5, iters: int = 30) -> Timing:
    """Time fn(i) (i = iteration, for rotating inputs) on the current stream; collective."""
    import cupy

    for i in range(warmup):
        fn(i)
    world.synchronize()
    world.barrier()
    start = [cupy.cuda.Event() for _ in range(iters)]
    stop = [cupy.cuda.Event() for _ in range(iters)]
    for i in range(iters):
        start[i].record()
        fn(warmup + i)
        stop[i].record()
    world.synchronize()
    times = [cupy.cuda.get_elapsed_time(a, b) for a, b in zip(start, stop)]
    med, lo = statistics.median(times), min(times)
    return Timing(world.comm.allreduce(med, op=_max()), world.comm.allreduce(lo, op=_max()), iters)


def _max():
    from mpi4py import MPI

    return MPI.MAX


def git_commit() -> str:
    import os
    import subprocess
    from pathlib import Path

    if os.environ.get("KOSMOS_COMMIT"):  # trees copied without .git (e.g. to a GPU machine)
        return os.environ["KOSMOS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip() or "unknown"
    except Exception:
        return "unknown"
