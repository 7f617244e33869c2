"""The MXFP8-A mainloop's variants against our bf16 GEMM (world 1, kosmos.timing, interleaved):
KOSMOS_MX_VARIANT 0 = exact (NaN check), 1 = no NaN check, 2 = no conversion (wrong values: the
RS mainloop's bound). python3 notes/debug/mx_variants.py [variants]"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos import World, gemm, mx  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402

SHAPES = [("TN", 32768, 1280, 8192), ("TN", 8192, 4096, 1792), ("NN", 8192, 512, 4096), ("TN", 8192, 8192, 8192)]


def main() -> None:
    variants = [int(v) for v in sys.argv[1:]] or [0, 1, 2]
    world = World()
    print(f"GPU {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, variants {variants}")
    print("layout      m      n      k  bf16 TF  " + "  ".join(f"v{v} TF  v{v}/bf16" for v in variants))
    for layout, m, n, k in SHAPES:
        a_shape, b_shape, _ = gemm.PaperShape("", "", m, n, k, layout).operand_shapes()
        a, b = random_bf16(a_shape, 1), random_bf16(b_shape, 2)
        a_mx = mx.quantize_both(a)[0]
        b_mx = mx.quantize_both(b)[0 if gemm.contracting_axis(layout, 1) == 1 else 1]
        out = cupy.empty((m, n), dtype=a.dtype)
        fns = {"bf16": lambda i: gemm.matmul(a, b, layout, out=out)}
        for v in variants:
            def run(i, v=v):
                gemm._extra_options = (f"-DKOSMOS_MX_VARIANT={v}",)
                gemm.matmul(a_mx, b_mx, layout, out=out)
                gemm._extra_options = ()
            fns[f"v{v}"] = run
        t = time_calls(world, fns, warmup=3, iters=20)
        tf = {name: 2 * m * n * k / (t[name].median_ms * 1e-3) / 1e12 for name in fns}
        print(f"{layout}  {m:6d} {n:6d} {k:6d}  {tf['bf16']:7.1f}  "
              + "  ".join(f"{tf[f'v{v}']:7.1f}  {tf[f'v{v}'] / tf['bf16']:.3f}" for v in variants), flush=True)
    world.finalize()


if __name__ == "__main__":
    main()
