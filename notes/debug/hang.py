"""Reproduce the fused-forward hang of test_fused_gemm2_combine_with_any_crew; dump device state on a hang."""
import os, sys, time
import numpy as np, cupy
from kosmos.world import World
from kosmos.dtypes import bfloat16
from kosmos import gemm
from kosmos.moe import MoEConfig, MoELayer, MoEParams, route
from kosmos.moe.forward import MoEForward
world = World()
cfg = MoEConfig(experts=8, top_k=2, hidden=512, intermediate=256, name="big")
mode = sys.argv[1] if len(sys.argv) > 1 else "both"
ref = MoELayer(world, cfg, max_tokens=5000, path="device") if mode == "both" else None
# MoEForward on a device-path layer's plans, routed by hand (MoELayer does not run it)
layer = MoELayer(world, cfg, max_tokens=5000, path="device")
layer._forward = MoEForward(layer._dispatch, layer._combine)
params = MoEParams.random(cfg, world, 17)


def fused_forward(x):
    logits = gemm.matmul(x, layer._padded_router_w(params), "TN", out_dtype=np.float32)  # 64-row multiple
    rt = route(logits, cfg)
    return layer._forward(x, rt, params.w1, params.w2)


side = cupy.cuda.Stream(non_blocking=True)
def dump(tag):
    f = layer._forward
    with side:
        vals = {n: cupy.asnumpy(a) for n, a in [("words", f._words), ("rows_done", f._rows_done),
                ("dflags", layer._dispatch.flags.local), ("cflags", layer._combine.flags.local),
                ("drun", layer._dispatch.run_done), ("crun", layer._combine.run_done),
                ("dcalls", layer._dispatch.calls), ("ccalls", layer._combine.calls)]}
    side.synchronize()
    print(tag, flush=True)
    for n, v in vals.items():
        print(" ", n, v.ravel()[:200].tolist(), flush=True)
    rc = f._rows_cap; tr = vals["rows_done"][2 * rc:]
    print("  cta markers", tr[:132].tolist(), flush=True)
    from kosmos.runtime import load_module
    from kosmos import gemm
    mod = load_module("moe_fused.hip", world=world, extra_options=gemm._extra_options)
    g = mod.get_global("kosmos_trace")
    with side:
        bt = cupy.ndarray((132, 16), np.uint64, g).get()
    side.synchronize()
    for b in np.nonzero(tr[:132] != 9)[0]:
        print("  builder trace", b, [hex(int(v)) for v in bt[b]], flush=True)
    print("  ctas with mbar records", np.nonzero(bt.any(axis=1))[0].tolist(), flush=True)
    print("  builder trace of a finished cta", [hex(int(v)) for v in bt[1]], flush=True)
    for b in np.nonzero(tr[:132] != 9)[0]:
        print("  stuck cta", b, "marker", tr[b], "per-warpgroup", tr[132 + 8 * b:132 + 8 * b + 8].tolist(), flush=True)
for it in range(int(os.environ.get("ITERS", "30"))):
    t = 4999 - (it % 7) * 300
    rng = np.random.default_rng(it)
    x = cupy.asarray(rng.standard_normal((t, 512), np.float32).astype(bfloat16))
    if ref is not None:
        ref.forward(x, params, check=True)
    y, h = fused_forward(x)
    ev = cupy.cuda.Event(); ev.record()
    t0 = time.time()
    while not ev.done:
        if time.time() - t0 > float(os.environ.get('WATCH', '8')):
            dump(f"HANG at iteration {it}, tokens {t}")
            if os.environ.get("WAITOUT"):
                while not ev.done: time.sleep(0.1)
                print("finished after", time.time() - t0, flush=True)
                dump("after")
                try:
                    world.status.raise_if_failed()
                except Exception as e:
                    print("STATUS", repr(e), flush=True)
            os._exit(3)
        time.sleep(0.01)
    print(f"it {it} tokens {t} ok {time.time()-t0:.3f}s status {int(layer._dispatch.status.get()[0])}", flush=True)
print("no hang", flush=True)
os._exit(0)
