"""A copy beside the builder (notes/moe.md, session 14): does a copy by the producer warpgroup's
idle warps (96 threads per builder CTA, 40 registers each) cost the GEMM anything, and how fast
does it go? Against the GEMM alone, the copy alone (cupy, the whole GPU) and the two in turn.

    python3 notes/debug/side_copy.py        (H200, world 1; ~1 min)

Interleaved through kosmos.timing (median of 20 after 3 warm-ups); "side GB/s" is the copy's bytes
over the side kernel's time: its rate when the copy is the longer of the two, a lower bound otherwise. Prediction (notes/moe.md): the
GEMMs read ~0.6-1 TB/s of the 4.8 TB/s, so a side copy of up to ~1 TB/s should cost them < 5 %;
96 threads x 4 vectors of 16 B in flight per SM at ~1.5 us latency is ~0.5 TB/s over 132 SMs.
"""
import sys
from pathlib import Path

import cupy
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from kosmos import World, gemm  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402

SHAPES = {"qwen3-30b-gemm1-2048": (32768, 1536, 2048), "dsv3-gemm1-2048": (2048, 4096, 7168),
          "square-8192": (8192, 8192, 8192)}
COPY_MB = (32, 134)


def memcpy(dst, src):
    rt = cupy.cuda.runtime
    rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, cupy.cuda.get_current_stream().ptr)

with World() as world:
    print(f"# {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, side copy probe", flush=True)
    print(f"{'shape':22s} {'MB':>4s} {'gemm':>8s} {'side':>8s} {'copy':>8s} {'both':>8s}  side/gemm  side GB/s")
    cursor = cupy.zeros(1, dtype=cupy.uint64)
    for name, (m, n, k) in SHAPES.items():
        a, b = random_bf16((m, k), 1), random_bf16((n, k), 2)
        out = cupy.empty((m, n), dtype=bfloat16)
        for mb in COPY_MB:
            src = cupy.random.randint(0, 255, size=mb << 20, dtype=cupy.uint8)
            dst = cupy.empty_like(src)
            fns = {"gemm": lambda i: gemm.matmul(a, b, "TN", out=out, tile_n=256, stream_k=False),
                   "side": lambda i: gemm._side_copy_matmul(a, b, out, src, dst, cursor),
                   "copy": lambda i: memcpy(dst, src),
                   "both": lambda i: (gemm.matmul(a, b, "TN", out=out, tile_n=256, stream_k=False), memcpy(dst, src))}
            t = {kk: v.median_ms for kk, v in time_calls(world, fns, 3, 20).items()}
            dst.fill(0)
            gemm._side_copy_matmul(a, b, out, src, dst, cursor)
            ok = bool((dst == src).all())
            print(f"{name:22s} {mb:4d} {t['gemm']:8.3f} {t['side']:8.3f} {t['copy']:8.3f} {t['both']:8.3f}  "
                  f"{t['side'] / t['gemm']:9.3f}  {(mb << 20) / t['side'] / 1e6:8.0f}  {'ok' if ok else 'COPY WRONG'}",
                  flush=True)
            del src, dst
