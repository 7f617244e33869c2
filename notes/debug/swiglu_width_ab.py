"""A/B of the grouped SwiGLU forward's tile width (session 39): kosmos.grouped_matmul(...,
epilogue="swiglu") forced to 256-wide tiles against the 128-wide ping-pong tile, in one tree,
interleaved call by call through kosmos.timing (median of --iters after warm-up, one GPU), on the
EP-8 shares of bench/grouped_gemm.py's models at a few rows per expert, balanced and skewed; the
chooser's pick (tile_n=None) beside them, and whether the outputs are bitwise equal. Needs the
128-wide SwiGLU tile, which main does not have (measured, not kept): apply
notes/patches/swiglu_pingpong.patch first.

    python3 notes/debug/swiglu_width_ab.py [--rows 128,256,512,2048] [--iters 30]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def main() -> None:
    import cupy

    from grouped_gemm import MODELS, routing_counts
    from kosmos.dtypes import random_bf16
    from kosmos.grouped import get_plan, grouped_matmul, grouped_shape
    from kosmos.timing import time_calls
    from one_gpu import one_gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="128,256,512,2048")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    with one_gpu("swiglu_width_ab.py") as (world, _):
        print(f"{'model':12s} {'rows/exp':>8s} {'routing':>8s} {'w256 us':>8s} {'w128 us':>8s} {'256/128':>8s} "
              f"{'auto':>5s} bitwise")
        for name, (e, h, i) in MODELS.items():
            for rows_per in (int(r) for r in args.rows.split(",")):
                for kind in ("balanced", "skewed"):
                    counts = routing_counts(e, rows_per, kind)
                    rows = int(counts.sum())
                    x, w1 = random_bf16((rows, h), 1), random_bf16((e, 2 * i, h), 2)
                    c = cupy.asarray(counts.astype("int32"))
                    outs = {w: (cupy.empty((rows, i), x.dtype), cupy.empty((rows, 2 * i), x.dtype)) for w in (256, 128)}
                    fns = {f"w{w}": (lambda w: lambda _: grouped_matmul(
                        x, w1, c, "TN", out=outs[w][0], epilogue="swiglu", gate_up=outs[w][1], tile_n=w))(w)
                        for w in (256, 128)}
                    t = time_calls(world, fns, 3, args.iters)
                    same = all(bool((outs[256][j].view(cupy.uint16) == outs[128][j].view(cupy.uint16)).all())
                               for j in range(2))
                    auto = get_plan(grouped_shape("TN", x.shape, w1.shape, e, "swiglu"), x.dtype).tile_n
                    a, b = t["w256"].median_ms * 1e3, t["w128"].median_ms * 1e3
                    print(f"{name:12s} {rows_per:8d} {kind:>8s} {a:8.1f} {b:8.1f} {a / b:8.3f} {auto:5d} {same}",
                          flush=True)


if __name__ == "__main__":
    main()
