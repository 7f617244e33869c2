"""Session 17 experiment: units whose output rows fit in 64 (one_warpgroup_rows, builder_wgmma.h) run
on one consumer warpgroup, the TMA bringing only its A rows. KOSMOS_IDLE_WG=1 (on) vs 0 (off),
interleaved call by call through kosmos.timing (world 1), with dense cuBLAS of the same FLOPs:
grouped GEMM1/GEMM2 of three models at 256 and 512 rows per expert, balanced and skewed, and plain
GEMMs whose last tile row holds <= 64 rows. Checks first: on and off bitwise equal (the valid rows
are the same wgmmas). python3 notes/debug/idle_wg.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from grouped_gemm import MODELS, routing_counts  # noqa: E402
from kosmos import World, gemm  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402


def with_idle(on: bool, fn):
    gemm._extra_options = (f"-DKOSMOS_IDLE_WG={int(on)}",)
    try:
        return fn()
    finally:
        gemm._extra_options = ()


def compare(name: str, call, flops: float, world) -> tuple[float, float, bool]:
    a = with_idle(True, call).copy()
    b = with_idle(False, call).copy()
    same = bool(cupy.array_equal(a.view(cupy.uint16), b.view(cupy.uint16)))
    t = time_calls(world, {"on": lambda i: with_idle(True, call), "off": lambda i: with_idle(False, call)},
                   warmup=3, iters=30)
    on, off = t["on"].median_ms, t["off"].median_ms
    print(f"{name:44s} on {on:8.4f} ms {flops / on / 1e9:7.1f} TF  off {off:8.4f} ms {flops / off / 1e9:7.1f} TF"
          f"  off/on {off / on:.3f}  {'bitwise' if same else 'DIFFER'}", flush=True)
    return on, off, same


def main() -> None:
    world = World()
    ok, gains = True, []
    for model, (experts, hidden, inter) in MODELS.items():
        for gname, n, k in (("GEMM1", 2 * inter, hidden), ("GEMM2", hidden, inter)):
            for rows in (256, 512):
                for kind in ("balanced", "skewed"):
                    counts = routing_counts(experts, rows, kind)
                    total = int(counts.sum())
                    x, w = random_bf16((total, k), 1), random_bf16((experts, n, k), 2)
                    out = cupy.full((total, n), np.nan, dtype=x.dtype)
                    c = cupy.asarray(counts)
                    on, off, same = compare(f"{model} {gname} {rows} {kind}",
                                            lambda: grouped_matmul(x, w, c, "TN", out=out), 2.0 * total * n * k, world)
                    ok &= same
                    gains.append(off / on)
    for m, n, k in ((8256, 4096, 4096), (320, 8192, 8192), (1031, 2048, 4096)):
        a, b = random_bf16((m, k), 3), random_bf16((n, k), 4)
        out = cupy.empty((m, n), dtype=a.dtype)
        on, off, same = compare(f"dense TN {m}x{n}x{k}", lambda: gemm.matmul(a, b, "TN", out=out), 2.0 * m * n * k, world)
        ok &= same
        gains.append(off / on)
    print(f"idle warpgroup: off/on geomean {float(np.exp(np.mean(np.log(gains)))):.3f}, "
          f"min {min(gains):.3f}, max {max(gains):.3f}; checks {'PASSED' if ok else 'FAILED'}")
    world.finalize()


if __name__ == "__main__":
    main()
