"""The movers' copy rate in isolation: gathered 4 KB rows (a random permutation) copied by CTAs
of 384 threads, one item (item_rows rows) at a time as the fused MoE kernels' movers do, through
bulk_copy_rows (hipsrc/kosmos/bulk_rows.h, staged in 224 KB of shared memory, as the fused kernels'
movers are) or the register
loop (cta_copy_rows, here with all the registers it wants: an upper bound for the fused kernels'
movers), with or without the system-scope fence that ends each item (items.h: item_done).

    python3 notes/debug/bulk_rate.py

Prints GB/s (bytes copied one way / median time of 10 launches) per configuration.
"""
import itertools
import sys
from pathlib import Path

import cupy
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from kosmos.runtime.source import compile_options  # noqa: E402

STAGE_KB = 224

SRC = r'''
#include "kosmos/bulk_rows.h"
using namespace kosmos;
extern "C" __global__ void __launch_bounds__(384, 1)
    bulk_rate(u8* dst, const u8* src, const i32* order, i32 rows, i32 row_bytes, i32 item_rows, u32 stage_bytes,
              i32 mode, i32 fence) {
  extern __shared__ __align__(128) u8 smem[];
  const i32 items = (rows + item_rows - 1) / item_rows;
  for (i32 it = blockIdx.x; it < items; it += gridDim.x) {
    const i32 first = it * item_rows, n = min(item_rows, rows - first);
    const auto from = [&](u32 r) { return src + u64(order[first + i32(r)]) * row_bytes; };
    u8* to = dst + u64(first) * row_bytes;
    if (mode == 0) bulk_copy_rows<4>(smem, stage_bytes, to, from, u32(n), u32(row_bytes));
    else cta_copy_rows<16>([&](u32 r) { return to + u64(r) * row_bytes; }, from, u32(n), u32(row_bytes));
    if (fence) {
      __syncthreads();
      if (threadIdx.x == 0) fence_acq_rel_sys();
    }
  }
}
'''


def main():
    dev = cupy.cuda.Device()
    cc = dev.compute_capability
    arch = "sm_90a" if cc == "90" else f"sm_{cc}"
    k = cupy.RawModule(code=SRC, options=compile_options("cuda", arch)).get_function("bulk_rate")
    k.max_dynamic_shared_size_bytes = STAGE_KB * 1024
    rows, row_bytes = 32768, 4096
    rng = np.random.default_rng(1)
    src = cupy.asarray(rng.integers(0, 255, rows * row_bytes, dtype=np.uint8))
    dst = cupy.empty_like(src)
    orders = {"gather": cupy.asarray(rng.permutation(rows).astype(np.int32)), "contiguous": cupy.arange(rows, dtype=cupy.int32)}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    print(f"{rows} rows of {row_bytes} B gathered, {rows * row_bytes / 1e6:.0f} MB; GB/s one way")
    print(f"{'mode':9s} {'rows':>10s} {'grid':>5s} {'item rows':>10s} {'fence':>6s} {'GB/s':>8s} {'per CTA':>8s}")
    cases = [("bulk", o, g, i, f) for o, g, i, f in itertools.product(orders, (33, 66, 132), (64, 512), (0, 1))]
    cases += [("register", o, g, i, f) for o, g, i, f in itertools.product(orders, (33, 132), (64, 512), (0, 1))]
    for mode, order_name, grid, item_rows, fence in cases:
        smem, order = STAGE_KB * 1024, orders[order_name]
        ref = src.reshape(rows, row_bytes)[order]
        args = (dst, src, order, np.int32(rows), np.int32(row_bytes), np.int32(item_rows), np.uint32(smem),
                np.int32(mode != "bulk"), np.int32(fence))
        dst.fill(0)
        k((grid,), (384,), args, shared_mem=smem)
        assert bool((dst.reshape(rows, row_bytes) == ref).all()), (mode, grid, item_rows, fence)
        times = []
        for _ in range(10):
            start.record()
            k((grid,), (384,), args, shared_mem=smem)
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
        gbs = rows * row_bytes / np.median(times) / 1e9
        print(f"{mode:9s} {order_name:>10s} {grid:5d} {item_rows:10d} {fence:6d} {gbs:8.0f} {gbs / grid:8.1f}", flush=True)


if __name__ == "__main__":
    main()
