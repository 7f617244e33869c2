"""Timing protocol shared by the demo and the benchmarks (the paper's Section 4.1.3).

Warm-up, then timed iterations with device events around each call, the median per rank,
and the slowest rank's median as the result. The timed calls are queued behind a blocking
kernel (hipsrc/timing.hip) that the host releases once all are issued, so the events time the
GPU and not Python's launch overhead; that overhead is reported beside it (host_us). Refuses to
time an oversubscribed world unless told to, since ranks sharing a GPU time-slice.
"""
from __future__ import annotations

import ctypes
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import KosmosError
from .world import World


@dataclass(frozen=True)
class Timing:
    median_ms: float  # slowest rank's median
    min_ms: float     # slowest rank's fastest iteration
    iters: int
    host_us: float = float("nan")  # slowest rank's mean host time to issue one call


class StreamBlocker:
    """Holds the current stream (kosmos_block_stream) until release(); gives up after budget_s."""

    def __init__(self, budget_s: float = 10.0, world: World | None = None):
        import cupy

        from .runtime import load_module

        rt = cupy.cuda.runtime
        self.budget_s = budget_s
        self._ptr = rt.hostAlloc(16, rt.hostAllocMapped | rt.hostAllocPortable)
        self._words = (ctypes.c_uint64 * 2).from_address(self._ptr)
        # With the world, node-local rank 0 compiles first and the others hit CuPy's cache.
        self._kernel = load_module("timing.hip", world=world).get_function("kosmos_block_stream")

    def hold(self) -> None:
        self._words[0] = self._words[1] = 0
        self._kernel((1,), (1,), (np.uint64(self._ptr), np.uint64(int(self.budget_s * 1e9))))

    def release(self) -> None:
        self._words[0] = 1

    @property
    def gave_up(self) -> bool:
        """True if the last hold ended by its budget (read after the stream is synchronized)."""
        return bool(self._words[1])


_blocker: StreamBlocker | None = None


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


# What one hold may queue behind the blocker, in launch-queue entries (kernel launches and event
# records). The driver's queue holds ~1,000 on an H100: bench/gemm.py's ten mxfp8 contenders (~3.5
# entries a call: two events, one to three launches) fit at 250 calls a hold and overflowed at 300
# (the host then blocks on a launch the held stream never takes, until the blocker gives up).
QUEUED_ENTRIES_PER_HOLD = 400


def rounds_per_hold_for(contenders: int, iters: int, rounds_per_hold: int | None = None,
                        entries_per_call: int = 3) -> int:
    """Rounds of every contender one hold queues: `rounds_per_hold` when given, else as many as keep
    QUEUED_ENTRIES_PER_HOLD entries (`entries_per_call` each: two events and a launch by default); at
    least 1, at most iters."""
    if rounds_per_hold is None:
        rounds_per_hold = QUEUED_ENTRIES_PER_HOLD // max(1, contenders * entries_per_call)
    return max(1, min(rounds_per_hold, iters))


def time_call(world: World, fn: Callable[[int], Any], warmup: int = 5, iters: int = 30) -> Timing:
    """Time fn(i) (i = iteration, for rotating inputs) on the current stream; collective."""
    return time_calls(world, {"fn": fn}, warmup, iters)["fn"]


def time_calls(world: World, fns: dict[str, Callable[[int], Any]], warmup: int = 5,
               iters: int = 30, rounds_per_hold: int | None = None, hold: bool = True) -> dict[str, Timing]:
    """Time several contenders, interleaved call by call so that clock and thermal drift over
    the run falls on all of them alike, each round in another order (round_order); collective.
    No fn may synchronize the stream: the timed calls are queued behind the stream blocker,
    released once all are issued. fn(i) gets the round's index (warm-up rounds first). rounds_per_hold:
    release (and wait) after this many rounds of every contender and hold again, so the queued
    rounds never overflow the device's launch queue (the host would then block on a launch that
    the held stream never takes). Default: rounds_per_hold_for's, for calls of one launch each;
    contenders of many launches pass a smaller one.
    hold=False: no blocker, for contenders that synchronize (a baseline whose counts go through the
    host): the events then also time the host's gaps inside each call, as its user would see them."""
    import cupy

    global _blocker
    for i in range(warmup):
        for fn in fns.values():
            fn(i)
    world.synchronize()
    if _blocker is None:
        _blocker = StreamBlocker(world=world)
    events = {name: [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(iters)] for name in fns}
    host_s = dict.fromkeys(fns, 0.0)
    per_hold = rounds_per_hold_for(len(fns), iters, rounds_per_hold)
    for first in range(0, iters, per_hold):
        world.barrier()
        if hold:
            _blocker.hold()
        for i in range(first, min(first + per_hold, iters)):
            for name in round_order(list(fns), i):
                fn = fns[name]
                start, stop = events[name][i]
                t0 = time.perf_counter()
                start.record()
                fn(warmup + i)
                stop.record()
                host_s[name] += time.perf_counter() - t0
        if hold:
            _blocker.release()
        world.synchronize()
        if hold and world.comm.allreduce(_blocker.gave_up, op=_max()):
            raise KosmosError(f"queuing {per_hold * len(fns)} timed calls took over {_blocker.budget_s} s on some "
                              "rank (does a timed function synchronize, or do they overflow the launch queue? "
                              "pass a smaller rounds_per_hold): no timing taken")
    out = {}
    for name, evs in events.items():
        times = [cupy.cuda.get_elapsed_time(a, b) for a, b in evs]
        med, lo, host_us = statistics.median(times), min(times), host_s[name] / iters * 1e6
        out[name] = Timing(*(world.comm.allreduce(v, op=_max()) for v in (med, lo)), iters,
                           world.comm.allreduce(host_us, op=_max()))
    return out


def round_order(names: list[str], i: int) -> list[str]:
    """Round i's call order: a shuffle seeded by i (the same on every rank), so that no contender
    always runs right after the same one. A call's time depends on its predecessor (what it left
    in L2, the clocks it left): in session 31 two contenders running the same kernel differed by
    up to 1.5x, always in the same direction, while the order was fixed (notes/gemm.md). (A
    rotation would not do: it keeps each contender's predecessor within a round.)"""
    order = list(names)
    random.Random(i).shuffle(order)
    return order


def _max():
    from mpi4py import MPI

    return MPI.MAX


def git_commit() -> str:
    import os
    import subprocess
    from pathlib import Path

    if os.environ.get("KOSMOS_COMMIT"):  # trees copied without (or with a stale) .git, e.g. to a GPU machine
        return os.environ["KOSMOS_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=here, timeout=5).stdout.strip()
        if not sha:
            return "unknown"
        # A tree that differs from HEAD did not run HEAD (a copy with a stale .git reads as an old commit).
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=here, timeout=30).returncode != 0
        return sha + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"
