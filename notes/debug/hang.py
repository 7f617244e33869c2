"""Soak MoEForward: ITERS calls, each after a device-path forward on the same input ("both"); on a call
that does not finish in WATCH seconds, dump the queue words and flags and exit 3. (The reproducer of
the builder's register-trade hang, mended in session 11, confirmed clean over 3,000 calls in 12.)"""
import os, sys, time
import numpy as np, cupy
from kosmos.world import World
from kosmos.dtypes import bfloat16
from kosmos import gemm
from kosmos.moe import MoEConfig, MoELayer, MoEParams, route
from kosmos.moe.forward import MoEForward
DEFS = tuple(os.environ.get("HANG_DEFS", "").split())  # extra compile options of the kernels
if DEFS:
    import kosmos.moe.dispatch as _disp
    _load = _disp.load_module
    _disp.load_module = lambda name, **kw: _load(name, **{**kw, "extra_options": (*kw.get("extra_options", ()), *DEFS)})
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
