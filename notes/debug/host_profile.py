"""Where the host's time per call goes (cProfile over --calls calls after a warm-up), for the MXFP8
AG+NN(+NT) op as bench/tp.py calls it (s44_b: ~420-850 us of host time a call, more than the GPU's
0.2 ms at 8B-OProj-MBS1) and, beside it, the bf16 AG+NN op. Prints the top functions by own time.
    PYTHONPATH=. python3 notes/debug/host_profile.py [--shape 8B-OProj-MBS1] [--calls 200]
"""
import argparse
import cProfile
import pstats
import time

from kosmos import World, mx
from kosmos.dtypes import bfloat16, random_bf16
from kosmos.shapes import load_llama3_shapes
from kosmos.tp.ops import AllGatherMatmul, AllGatherMatmulNNNT


def profile(name, fn, calls, top):
    import cupy

    for i in range(5):
        fn()
    cupy.cuda.Device().synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for i in range(calls):
        fn()
    prof.disable()
    host_us = (time.perf_counter() - t0) / calls * 1e6
    cupy.cuda.Device().synchronize()
    print(f"== {name}: {host_us:.0f} us a call under the profiler")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    import cupy

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8B-OProj-MBS1")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=22)
    args = ap.parse_args()
    s = next(s for s in load_llama3_shapes() if s.kernel == "ag_nn" and s.name == args.shape)
    m, n, k = s.m, s.k, s.n  # bench/tp.py op_dims: dY[m, n=K] @ W[K, N]
    with World() as world:
        dy_rows, dy_cols = mx.quantize_both(random_bf16((m, n), 1))
        w = mx.quantize_both(random_bf16((n, k), 2, 0.05))[1]
        x = mx.quantize_both(random_bf16((m, k), 4))[1]
        op = AllGatherMatmulNNNT(world, m, n, k)
        dx, dw = cupy.empty((m, k), bfloat16), cupy.empty((n, k), bfloat16)
        print(op.describe())
        profile("AllGatherMatmulNNNT (mxfp8)", lambda: op(dy_rows, dy_cols, w, x, dx, dw), args.calls, args.top)
        dy_bf, w_bf = random_bf16((m, n), 1), random_bf16((n, k), 2, 0.05)
        ag = AllGatherMatmul(world, m, n, k, layout="NN")
        profile("AllGatherMatmul NN (bf16)", lambda: ag(dy_bf, w_bf, dx), args.calls, args.top)


if __name__ == "__main__":
    main()
