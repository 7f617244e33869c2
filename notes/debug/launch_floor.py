"""What a launch costs before any tile: the fixed part of a short GEMM's time (session 31).

tile_trace.py left ~5.4-6.6 us of a 256-row grouped GEMM outside its per-unit trace (launch to
consumers entering, the last store's drain) plus ~3 us to the first stage. This times, by
kosmos.timing (queued behind the blocker, events around each call, interleaved medians):
an empty kernel of one block; an empty kernel of the GEMM's grid, block and dynamic shared
memory; the grouped GEMM (Qwen3-30B fwd1 shapes) with every count zero -- its prologue, group
table, first claim and exit, no unit -- and at 256 rows per expert for scale; the dense GEMM on a
128 x 256 x 64 problem (one tile, one slab).

    python3 notes/debug/launch_floor.py
"""
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import World, gemm  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402

EMPTY = cupy.RawKernel(r'extern "C" __global__ void empty_kernel(int* p) { if (p[0] == 12345) p[1] = 1; }',
                       "empty_kernel")


def main() -> None:
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    smem = gemm.shared_mem_bytes()
    EMPTY.max_dynamic_shared_size_bytes = smem
    flag = cupy.zeros(2, cupy.int32)
    e, h, n = 16, 2048, 1536
    x, w = random_bf16((e * 256, h), 1), random_bf16((e, n, h), 2)
    zero, full = cupy.zeros((e,), cupy.int32), cupy.full((e,), 256, cupy.int32)
    out = cupy.empty((e * 256, n), x.dtype)
    a1, b1, o1 = random_bf16((128, 64), 3), random_bf16((256, 64), 4), cupy.empty((128, 256), x.dtype)
    runs = {
        "empty kernel, 1 block": lambda _: EMPTY((1,), (32,), (flag,)),
        f"empty kernel, {sms} x {gemm.block_threads()}, {smem // 1024} KB": lambda _: EMPTY(
            (sms,), (gemm.block_threads(),), (flag,), shared_mem=smem),
        "grouped fwd1, every count 0": lambda _: grouped_matmul(x, w, zero, "TN", out=out, tile_n=192),
        "grouped fwd1, 256 rows each": lambda _: grouped_matmul(x, w, full, "TN", out=out, tile_n=192),
        "dense 128 x 256 x 64 (one tile)": lambda _: gemm.matmul(a1, b1, "TN", out=o1),
    }
    with World() as world:
        r = time_calls(world, runs, 5, 40)
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: median / min us by events; host us a call")
    for name, t in r.items():
        print(f"  {name:40s} {t.median_ms * 1e3:7.1f} {t.min_ms * 1e3:7.1f} {t.host_us:7.1f}")


if __name__ == "__main__":
    main()
