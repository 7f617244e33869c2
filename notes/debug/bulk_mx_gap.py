"""Where bulk AG || NN's MXFP8 gap lies at world 1 (notes/mxfp8.md "Left above 3 %": 1.16-1.26 of the
plain MXFP8 GEMM at the QKV shapes, where the bf16 op is 1.00 of the bf16 GEMM). Contenders,
interleaved (kosmos.timing), one shape each:
  op_mx      the MXFP8 op as bench/tp.py runs it (x column-blocked, dY and W MXFP8)
  op_mx_bf   the MXFP8 op given bf16 dY and W (no dequantize in the call)
  op_bf16    the bf16 op on bf16 x, dY, W
  gemm_mx    kosmos.matmul(dY MXFP8, W MXFP8, "NN")   (dequantize both, bf16 GEMM)
  gemm_bf16  kosmos.matmul(dY, W, "NN") on bf16
  deq        the two dequantizes alone
    PYTHONPATH=. python3 notes/debug/bulk_mx_gap.py [--shapes 70B-QKV-MBS2,...] [--iters 20]
"""
import argparse

from kosmos import World, gemm, mx
from kosmos.dtypes import bfloat16, random_bf16
from kosmos.shapes import load_llama3_shapes
from kosmos.timing import device_name, git_commit, time_calls
from kosmos.tp.ops import BulkAllGatherMatmul


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="70B-QKV-MBS2,405B-QKV-MBS1,8B-QKV-MBS8,8B-FC1-MBS8")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    with World() as world:
        run(world, args)


def run(world, args) -> None:
    import cupy

    shapes = {s.name: s for s in load_llama3_shapes() if s.kernel == "bulk_ag_nn"}
    print(f"{device_name()}, world {world.size}, commit {git_commit()}")
    for name in args.shapes.split(","):
        s = shapes[name]
        m, n, k = s.m, s.k, s.n  # bench/tp.py op_dims for bulk_ag_nn: dY[m, n=K] @ W[K, N]
        x_bf, dy_bf, w_bf = random_bf16((m, k), 1), random_bf16((m, n), 3), random_bf16((n, k), 2, 0.05)
        x_mx = mx.quantize_both(x_bf)[1]
        dy_mx, w_mx = mx.quantize_both(dy_bf)[0], mx.quantize_both(w_bf)[1]
        op_mx = BulkAllGatherMatmul(world, m, n, k, precision="mxfp8")
        op_bf = BulkAllGatherMatmul(world, m, n, k)
        dx = cupy.empty((m, k), bfloat16)
        deq_dy, deq_w = cupy.empty((m, n), bfloat16), cupy.empty((n, k), bfloat16)
        fns = {
            "op_mx": lambda i: op_mx(x_mx, dy_mx, w_mx, dx),
            "op_mx_bf": lambda i: op_mx(x_mx, dy_bf, w_bf, dx),
            "op_bf16": lambda i: op_bf(x_bf, dy_bf, w_bf, dx),
            "gemm_mx": lambda i: gemm.matmul(dy_mx, w_mx, "NN", out=dx),
            "gemm_mx_w256": lambda i: gemm.matmul(dy_mx, w_mx, "NN", out=dx, tile_n=256),
            "gemm_bf16": lambda i: gemm.matmul(dy_bf, w_bf, "NN", out=dx),
            "deq": lambda i: (mx.dequantize_device(dy_mx, out=deq_dy), mx.dequantize_device(w_mx, out=deq_w)),
        }
        t = time_calls(world, fns, warmup=5, iters=args.iters)
        print(f"{name:16s} m {m} n {n} k {k} {op_mx.describe()}")
        shape = gemm.gemm_shape("NN", (m, n), (n, k))
        print(f"  dy_stays_mx {op_mx.dy_stays_mx}; plain MXFP8 route "
              f"{gemm.mx_route(shape, True, 2, 1, None, None, True, gemm.mx_a_max_columns())}; "
              f"plain bf16 plan {gemm.get_plan(shape, bfloat16).kernel_name}")
        print("  " + "  ".join(f"{a} {b.median_ms:.3f}" for a, b in t.items()))


if __name__ == "__main__":
    main()
