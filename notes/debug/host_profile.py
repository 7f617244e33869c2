"""Where the host time of one call goes (session 32): kosmos.timing's host_us is ~60-110 us for a
plain GEMM (cupy.matmul's ~55-70 us on the same host), ~180-240 us for grouped_matmul and
~300-400 us for a fused MoE forward (the layer path: 650-900 us) -- more than the device time of
the small-M grouped GEMMs (37-61 us) and of the 256-row MoE forwards (0.2 ms): eager callers there
wait on the host, not the GPU.

For each call: the mean host time of `--calls` calls (the device drains every 50, so the launch
queue never fills and the host never blocks on it), then cProfile over as many, top functions by
own time and by cumulative time.

    python3 notes/debug/host_profile.py [--calls 400] [--profile --top 22] [--uncached]

Also the TP row backward at 8B-OProj-MBS1 (session 45; s44_b: 420-850 us of host time a call of the
MXFP8 AG+NN(+NT), more than its 0.2 ms on the GPU) beside the bf16 AG+NN: --only 8B-OProj.

--uncached: matmul's and grouped_matmul's checked-call caches (kosmos.runtime.call_cache), the
plans' argument memos, MoEForward's (session 33), MoEBackward's (session 34) and MoELayer's checks of
backward's out (session 36) bypassed: the host
cost before those caches (the layer's held buffers stay), for an A/B in one call; --uncached-moe:
only the MoE memos (MoEForward's, MoEBackward's, the out checks'). --only NAME: the calls whose names contain NAME.
"""
import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from kosmos import World, gemm, graphs, grouped, mx  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402
from kosmos.moe import MoELayer, MoEParams  # noqa: E402
from kosmos.shapes import load_llama3_shapes  # noqa: E402
from kosmos.tp.ops import AllGatherMatmul, AllGatherMatmulNNNT  # noqa: E402
from moe import share, tokens_of  # noqa: E402

EMPTY = cupy.RawKernel(r'extern "C" __global__ void empty_kernel(int* p) { if (p[0] == 12345) p[1] = 1; }',
                       "empty_kernel")


def host_us(fn, calls: int) -> float:
    total = 0.0
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        total += time.perf_counter() - t0
        if i % 50 == 49:
            cupy.cuda.Device().synchronize()
    cupy.cuda.Device().synchronize()
    return total / calls * 1e6


def profile(fn, calls: int, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        fn()
        if i % 50 == 49:
            cupy.cuda.Device().synchronize()
    prof.disable()
    cupy.cuda.Device().synchronize()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return s.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--top", type=int, default=22)
    ap.add_argument("--profile", action="store_true", help="cProfile each call too")
    ap.add_argument("--uncached", action="store_true")
    ap.add_argument("--uncached-moe", action="store_true", help="only MoEForward's and MoEBackward's memos bypassed")
    ap.add_argument("--only", default="", help="only the calls whose names contain this")
    args = ap.parse_args()
    lookups = {"all": 0, "hits": 0}  # the checked-call caches' lookups during each contender's timing

    def bypass_or_count(caches, bypass=args.uncached):
        for cache in caches:
            if bypass:
                cache.get = lambda key: None
                continue

            def counted(key, get=cache.get):
                hit = get(key)
                lookups["all"] += 1
                lookups["hits"] += hit is not None
                return hit
            cache.get = counted

    bypass_or_count((gemm._checked_calls, grouped._checked_calls))
    if args.uncached:  # every module's argument memo (each imports call_cache.remember)
        from kosmos.moe import route as moe_route
        from kosmos.tp import ops as tp_ops

        for module in (gemm, grouped, moe_route, tp_ops):
            module.remember = lambda *a, **k: None
    flag = cupy.zeros(2, cupy.int32)
    e, h, n = 16, 2048, 1536
    x, w = random_bf16((e * 256, h), 1), random_bf16((e, n, h), 2)
    full = cupy.full((e,), 256, cupy.int32)
    out = cupy.empty((e * 256, n), x.dtype)
    a, b, o = random_bf16((256, 8192), 3), random_bf16((8192, 8192), 4), cupy.empty((256, 8192), x.dtype)
    with World() as world:
        cfg = share("Qwen3-30B-A3B")
        tokens = tokens_of(cfg, 256)
        layers = {p: MoELayer(world, cfg, max_tokens=tokens, path=p) for p in ("fused", "device")}
        bypass_or_count((layers["fused"]._forward._heads_memo,), args.uncached or args.uncached_moe)  # session 33's
        bypass_or_count((layers["fused"]._checked_outs,), args.uncached or args.uncached_moe)  # session 36's (out=)
        from kosmos.moe import backward as moe_backward  # session 34's memo: MoEBackward's (built at its first call)

        init = moe_backward.MoEBackward.__init__

        def bypassed_or_counted_init(self, *a, **k):
            init(self, *a, **k)
            bypass_or_count((self._heads_memo,), args.uncached or args.uncached_moe)
        moe_backward.MoEBackward.__init__ = bypassed_or_counted_init
        params = MoEParams.random(cfg, world, 5)
        xt = random_bf16((tokens, cfg.hidden), 6)
        calls = {
            "empty RawKernel launch": lambda: EMPTY((1,), (32,), (flag,)),
            "cupy.matmul 256x8192x8192 (out=)": lambda: cupy.matmul(a, b.T, out=o),
            "kosmos.matmul 256x8192x8192 TN (out=)": lambda: gemm.matmul(a, b, "TN", out=o),
            "grouped_matmul Qwen3-30B fwd1 256 rows (out=)": lambda: grouped_matmul(x, w, full, "TN", out=out),
            "grouped_matmul, no out": lambda: grouped_matmul(x, w, full, "TN"),
            "MoELayer fused forward, Qwen3-30B/EP8 256 rows": lambda: layers["fused"].forward(xt, params),
            "MoELayer device forward (the layer path)": lambda: layers["device"].forward(xt, params),
        }
        s8 = next(s for s in load_llama3_shapes() if s.kernel == "ag_nn" and s.name == "8B-OProj-MBS1")
        tm, tn, tk = s8.m, s8.k, s8.n  # bench/tp.py op_dims: dY[m, n=K] @ W[K, N]
        dy_rows, dy_cols = mx.quantize_both(random_bf16((tm, tn), 8))
        w_mx = mx.quantize_both(random_bf16((tn, tk), 9, 0.05))[1]
        x_mx = mx.quantize_both(random_bf16((tm, tk), 10))[1]
        nnnt, ag_nn = AllGatherMatmulNNNT(world, tm, tn, tk), AllGatherMatmul(world, tm, tn, tk, layout="NN")
        dx, dw = cupy.empty((tm, tk), bfloat16), cupy.empty((tn, tk), bfloat16)
        dy_bf, w_bf = random_bf16((tm, tn), 8), random_bf16((tn, tk), 9, 0.05)
        calls["AG+NN(+NT) mxfp8 8B-OProj-MBS1"] = lambda: nnnt(dy_rows, dy_cols, w_mx, x_mx, dx, dw)
        calls["AG+NN bf16 8B-OProj-MBS1"] = lambda: ag_nn(dy_bf, w_bf, dx)
        dy = random_bf16((tokens, cfg.hidden), 7)

        def device_step():  # a training step: the context lives until its backward
            _, ctx = layers["device"].forward(xt, params)
            layers["device"].backward(dy, ctx, params)

        def fused_step():
            _, ctx = layers["fused"].forward(xt, params)
            layers["fused"].backward(dy, ctx, params)

        grads = None

        def fused_step_into():  # the same, the gradients into the caller's buffers (backward's out=)
            nonlocal grads
            _, ctx = layers["fused"].forward(xt, params)
            grads = layers["fused"].backward(dy, ctx, params, out=grads)

        calls["MoELayer device forward + backward (a step)"] = device_step
        calls["MoELayer fused forward + backward (a step)"] = fused_step
        calls["MoELayer fused forward + backward (a step, out=)"] = fused_step_into
        replayed = "the fused forward, a captured graph replayed"
        calls = {k: v for k, v in calls.items() if args.only in k}
        for fn in calls.values():  # compile, plan, cache
            for _ in range(3):
                fn()
        cupy.cuda.Device().synchronize()
        if args.only in replayed:  # the remedy kosmos.graphs offers eager callers: captured once, replayed
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                layers["fused"].forward(xt, params)
            with graphs.capture(stream, world) as step:
                layers["fused"].forward(xt, params)
            stream.synchronize()
            calls[replayed] = step.launch
        table = []
        for name, fn in calls.items():
            lookups.update(all=0, hits=0)
            us = host_us(fn, args.calls)
            hits = f"{lookups['hits']} of {lookups['all']}" if lookups["all"] else "-"
            table.append((name, us, hits))
            print(f"===== {name}: {us:.1f} us host per call; checked-call cache hits {hits}")
            if args.profile:
                print(profile(fn, args.calls, args.top))
        print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: host us per call (mean of {args.calls})"
              + (", caches bypassed" if args.uncached else ", MoEForward's memo bypassed" if args.uncached_moe else ""))
        print(f"  {'':50s} {'host us':>8s}  cache hits")
        for name, us, hits in table:
            print(f"  {name:50s} {us:8.1f}  {hits}")


if __name__ == "__main__":
    main()
