"""The MXFP8-A register path's variants against our bf16 GEMM (world 1, kosmos.timing, interleaved).

KOSMOS_MX_VARIANT (hipsrc/kosmos/mx/dequant.h, builder_wgmma.h):
  0 = session 16's conversion (prmt/and/shr/lop3 a pair) + per-slab NaN check with an integer slow path
  3 = sign-replicating prmt + shift + mask a pair, the same per-slab NaN check
  4 = 3's conversion, NaN codes watched lazily (AND-accumulated a row, the row set to NaN after the unit)
  5 = 3's conversion, no NaN check (wrong for NaN codes: the bound of the check's cost)
  2 = no conversion (wrong values: the RS mainloop's bound)
The register path is forced on every shape (gemm.MX_A_MAX_COLUMNS lifted). Checks first: every exact
variant bitwise equal to variant 0 on random operands, and on operands with NaN codes under finite
scales (NaN in the same places). python3 notes/debug/mx_variants.py [variants]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos import World, gemm, mx  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402

SHAPES = [("TN", 8192, 768, 4096), ("TN", 32768, 1280, 8192), ("NN", 8192, 512, 4096), ("NN", 32768, 1024, 8192),
          ("TN", 8192, 3584, 4096), ("NN", 8192, 1792, 4096), ("TN", 8192, 4096, 1792)]
EXACT = {0, 3, 4}


def operands(layout: str, m: int, n: int, k: int, seed: int):
    a_shape, b_shape, _ = gemm.PaperShape("", "", m, n, k, layout).operand_shapes()
    a, b = random_bf16(a_shape, seed), random_bf16(b_shape, seed + 1)
    a_mx = mx.quantize_both(a)[0]
    b_mx = mx.quantize_both(b)[0 if gemm.contracting_axis(layout, 1) == 1 else 1]
    return a_mx, b_mx


def run_variant(v: int, a_mx, b_mx, layout: str, out) -> None:
    gemm._extra_options = (f"-DKOSMOS_MX_VARIANT={v}",)
    try:
        gemm.matmul(a_mx, b_mx, layout, out=out)
    finally:
        gemm._extra_options = ()


def check(variants: list[int]) -> bool:
    ok = True
    for layout, m, n, k in [("TN", 640, 384, 1024), ("NN", 384, 256, 704)]:
        for nan in (False, True):
            a_mx, b_mx = operands(layout, m, n, k, 7)
            if nan:  # NaN codes (0x7F / 0xFF) in a few rows under finite scales
                codes = a_mx.data
                rows = cupy.asarray([1, 77, m - 1])
                if layout == "TN":
                    codes[rows, cupy.asarray([5, 600, k - 1])] = cupy.asarray([0x7F, 0xFF, 0x7F], dtype=cupy.uint8)
                else:  # NN: A is [M, K] too (row-blocks along K)
                    codes[rows, cupy.asarray([3, 300, k - 1])] = cupy.asarray([0xFF, 0x7F, 0x7F], dtype=cupy.uint8)
            outs = {}
            for v in [0] + [v for v in variants if v in EXACT and v != 0]:
                o = cupy.full((m, n), 0x7FC1, dtype=cupy.uint16).view(bfloat16)  # poisoned: NaN
                run_variant(v, a_mx, b_mx, layout, o)
                outs[v] = cupy.asnumpy(o).view(np.uint16)
            ref = outs[0]
            ref_nan = (ref & 0x7FFF) > 0x7F80
            for v, o in outs.items():
                o_nan = (o & 0x7FFF) > 0x7F80
                same = bool(np.array_equal(o_nan, ref_nan) and np.array_equal(o[~ref_nan], ref[~ref_nan]))
                rows_nan = int(ref_nan.all(axis=1).sum())
                print(f"check {layout} {m}x{n}x{k} nan={nan}: v{v} {'OK' if same else 'DIFFERS'} "
                      f"(NaN rows {rows_nan})", flush=True)
                ok &= same
    return ok


def main() -> None:
    variants = [int(v) for v in sys.argv[1:]] or [0, 3, 4, 5, 2]
    gemm.MX_A_MAX_COLUMNS = 1 << 30
    world = World()
    print(f"GPU {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, variants {variants}")
    ok = check(variants)
    print("checks", "PASSED" if ok else "FAILED", flush=True)
    print("layout      m      n      k  bf16 TF  " + "  ".join(f"v{v} TF  v{v}/bf16" for v in variants))
    for layout, m, n, k in SHAPES:
        a_shape, b_shape, _ = gemm.PaperShape("", "", m, n, k, layout).operand_shapes()
        a, b = random_bf16(a_shape, 1), random_bf16(b_shape, 2)
        a_mx, b_mx = operands(layout, m, n, k, 1)
        out = cupy.empty((m, n), dtype=a.dtype)
        fns = {"bf16": lambda i: gemm.matmul(a, b, layout, out=out)}
        for v in variants:
            fns[f"v{v}"] = lambda i, v=v: run_variant(v, a_mx, b_mx, layout, out)
        t = time_calls(world, fns, warmup=3, iters=30)
        tf = {name: 2 * m * n * k / (t[name].median_ms * 1e-3) / 1e12 for name in fns}
        print(f"{layout}  {m:6d} {n:6d} {k:6d}  {tf['bf16']:7.1f}  "
              + "  ".join(f"{tf[f'v{v}']:7.1f}  {tf[f'v{v}'] / tf['bf16']:.3f}" for v in variants), flush=True)
    world.finalize()


if __name__ == "__main__":
    main()
