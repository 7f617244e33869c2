"""The dequantize kernel (kosmos.mx.dequantize_device: the MXFP8 GEMM's "pass" route and the local
copies) on this tree (A) against another tree's kernels (B, --tree-b HIPSRC), interleaved through
kosmos.timing; row- and column-block copies of the paper-sized activations and weights. Bitwise A ==
B is checked first. World 1, one GPU: a timing, so never oversubscribed.

    python3 notes/debug/dequant_ab.py --tree-b /tmp/tree_main/hipsrc
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]
import cupy  # noqa: E402

from kosmos import mx  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.runtime.source import in_kernel_tree  # noqa: E402
from kosmos.timing import check_timeable, device_name, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402

SHAPES = [(8192, 4096), (8192, 1024), (16384, 1792), (768, 4096), (4096, 14336), (65536, 512)]

ap = argparse.ArgumentParser()
ap.add_argument("--tree-b", required=True)
ap.add_argument("--iters", type=int, default=30)
args = ap.parse_args()
with World() as world:
    check_timeable(world)
    print(f"{device_name()}, world {world.size}; ms median A / B (B/A > 1: A faster)")
    for rows, cols in SHAPES:
        x = random_bf16((rows, cols), rows + cols, 3.0)
        row, col = mx.quantize_both(x)
        for name, t in (("row", row), ("col", col)):
            a = mx.dequantize_device(t)
            b = in_kernel_tree(args.tree_b, mx.dequantize_device)(t)
            same = bool((a.view(cupy.uint16) == b.view(cupy.uint16)).all())
            out = cupy.empty((rows, cols), bfloat16)
            fns = {"A": lambda _, t=t: mx.dequantize_device(t, out=out),
                   "B": in_kernel_tree(args.tree_b, lambda _, t=t: mx.dequantize_device(t, out=out))}
            tm = time_calls(world, fns, warmup=5, iters=args.iters)
            ta, tb = tm["A"].median_ms, tm["B"].median_ms
            gbs = rows * cols * (1 + 1 / 32 + 2) / ta / 1e6
            print(f"{rows:6d} x {cols:6d} {name}: A {ta:.4f}  B {tb:.4f}  B/A {tb / ta:.3f}  A {gbs:6.0f} GB/s  "
                  f"bitwise {same}", flush=True)
