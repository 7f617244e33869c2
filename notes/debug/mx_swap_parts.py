"""Where the swapped MXFP8 wgrad's time goes (sessions 29-30): per NT shape, the whole
matmul(dy_t, x_t, "TN") (kosmos.gemm.mx_route "swapped": the result stored transposed by the MxA
epilogue), its parts -- B's rewrite (kosmos.mx.kperm_operand of dy_t), the MxA GEMM on the
rewritten B stored as it is -- and our bf16 NT GEMM of the same shape, interleaved
(kosmos.timing.time_calls, medians, one GPU). (Session 30 also timed the GEMM followed by a bf16
transpose pass here, main before the transposed store: notes/mxfp8.md; that kernel is gone.)

    python3 notes/debug/mx_swap_parts.py
"""
import cupy

from kosmos import World, gemm, mx
from kosmos.dtypes import random_bf16
from kosmos.timing import time_calls

SHAPES = {"8B-QKV": (8192, 768, 4096), "70B-QKV": (32768, 1280, 8192)}  # tokens, dW rows, dW cols

with World() as world:
    for name, (t, n, k) in SHAPES.items():
        dy, x = random_bf16((t, n), 1), random_bf16((t, k), 2)
        (_, dy_t), (_, x_t) = (mx.quantize_both(v, transpose_columns=True) for v in (dy, x))
        out = cupy.empty((n, k), dy.dtype)
        out_t = cupy.empty((k, n), dy.dtype)
        bp = mx.kperm_operand(dy_t, axis=1)
        plan = gemm.get_plan(gemm.gemm_shape("TN", x_t.shape, dy_t.shape), out.dtype, None, 1, None, False, mx_a=True)
        fns = {
            "swapped": lambda i: gemm.matmul(dy_t, x_t, "TN", out=out),
            "kperm B": lambda i: mx.kperm_operand(dy_t, axis=1),
            "MxA GEMM": lambda i: plan(x_t, bp, out_t),
            "bf16 NT": lambda i: gemm.matmul(dy, x, "NT", out=out),
        }
        r = time_calls(world, fns, 5, 30)
        flop = 2 * t * n * k
        print(f"{name:8s} " + "  ".join(f"{key} {v.median_ms * 1e3:7.1f} us" for key, v in r.items())
              + f"  | swapped {flop / r['swapped'].median_ms / 1e9:.0f} TF/s, bf16 NT {flop / r['bf16 NT'].median_ms / 1e9:.0f}",
              flush=True)
