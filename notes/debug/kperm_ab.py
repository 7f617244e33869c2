"""kosmos.mx.kperm_operand (B of the MXFP8-A GEMM: dequantized, its reduction permuted per 64-slab)
timed in this tree against another hipsrc tree's kernel, interleaved (kosmos.timing.time_calls,
medians, one GPU), on the B operands the quick MXFP8 shapes rewrite: a TN weight (row blocks), an
NN weight (column blocks), the swapped wgrad's dY^T (row blocks), and a bf16 B. GB/s = codes and
scales read + bf16 written, over the median.

    python3 notes/debug/kperm_ab.py --tree-b /tmp/tree_main/hipsrc
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kosmos import World, mx  # noqa: E402
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.runtime.source import in_kernel_tree  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402

# name: (rows, cols, axis: the reduction axis, mx: quantized or bf16)
CASES = {"TN W 768x4096 rows": (768, 4096, 1, True), "TN W 4096x512 rows": (4096, 512, 1, True),
         "NN W 4096x1792 cols": (4096, 1792, 0, True), "wgrad dY^T 768x8192": (768, 8192, 1, True),
         "wgrad dY^T 1280x32768": (1280, 32768, 1, True), "TN bf16 768x4096": (768, 4096, 1, False)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree-b", required=True)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    with World() as world:
        print(f"# {device_name()}", flush=True)
        for name, (rows, cols, axis, quantized) in CASES.items():
            x = random_bf16((rows, cols), 3)
            b = mx.quantize_both(x)[0 if axis == 1 else 1] if quantized else x
            fns = {"A": lambda i: mx.kperm_operand(b, axis=axis)}
            fns["B"] = in_kernel_tree(args.tree_b, fns["A"])
            r = time_calls(world, fns, 5, args.iters)
            moved = rows * cols * (2 + (1 + 1 / 32 if quantized else 2))
            a_ms, b_ms = r["A"].median_ms, r["B"].median_ms
            print(f"{name:24s} A {a_ms * 1e3:7.1f} us ({moved / a_ms / 1e6:5.0f} GB/s)  B {b_ms * 1e3:7.1f} us "
                  f"({moved / b_ms / 1e6:5.0f} GB/s)  B/A {b_ms / a_ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
