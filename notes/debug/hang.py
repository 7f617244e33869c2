"""Reproduce the fused-forward hang of test_fused_gemm2_combine_with_any_crew; dump device state on a hang."""
import os, sys, time
import numpy as np, cupy
from kosmos.world import World
from kosmos.dtypes import bfloat16
from kosmos import gemm
from kosmos.moe import MoEConfig, MoELayer, MoEParams, route
from kosmos.moe.forward import MoEForward
DEFS = tuple(os.environ.get("HANG_DEFS", "").split())  # e.g. -DKOSMOS_DBG_TRACE (moe_fused.hip only)
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
    if "-DKOSMOS_DBG_TRACE" in DEFS:  # where each warp last was around the register trade (builder_wgmma.h)
        from kosmos.runtime import load_module
        mod = load_module("moe_fused.hip", world=world, extra_options=(*gemm._extra_options, *DEFS))
        with side:
            tr = cupy.ndarray((1024, 12), np.uint64, mod.get_global("kosmos_trade_trace")).get()
        side.synchronize()
        points = {1: "entry", 2: "prod .dec done", 3: "prod at barrier 4", 4: "prod .inc done", 5: "cons .inc done",
                  6: "cons jobs done", 7: "cons .dec done", 8: "call done"}
        for b in range(132):
            if all(int(v) >> 32 == 8 for v in tr[b]) and len({int(v) & 0xffffffff for v in tr[b]}) == 1:
                continue  # every warp finished the same call
            print(f"  cta {b}: " + "; ".join(f"w{w} {points.get(int(v) >> 32, int(v) >> 32)} (call {int(v) & 0xffffffff})"
                                            for w, v in enumerate(tr[b])), flush=True)
    if "-DKOSMOS_DBG_BUILDER" not in DEFS:
        return
    from kosmos.runtime import load_module
    mod = load_module("moe_fused.hip", world=world, extra_options=(*gemm._extra_options, *DEFS))
    with side:
        bt = cupy.ndarray((132, 16), np.uint64, mod.get_global("kosmos_trace")).get()
        rd = cupy.ndarray((132, 12, 2), np.uint64, mod.get_global("kosmos_reads")).get()
    side.synchronize()
    def word(v):
        v = int(v)
        return (f"tag {v >> 56:#x} call {(v >> 52) & 15} s {(v >> 48) & 15} ph {(v >> 44) & 15} "
                f"i {(v >> 32) & 0xfff} t {np.int32(np.uint32(v & 0xffffffff))}")
    for b in range(132):
        r = bt[b]
        if not r[:12].any() and not r[15]:
            continue
        print(f"  cta {b}: entry call {int(r[14]) >> 56} prod s/ph {(int(r[14]) >> 48) & 15}/{(int(r[14]) >> 44) & 15} "
              f"cons s/ph {(int(r[14]) >> 40) & 15}/{(int(r[14]) >> 36) & 15} units {int(r[14]) & 0xffffffff}", flush=True)
        for w in range(12):
            if r[w]:
                print(f"    warp {w}: {word(r[w])}", flush=True)
        print(f"    barrier word {int(r[12]):#018x}  slots {[np.int16(np.uint16((int(r[13]) >> (16 * q)) & 0xffff)) for q in range(4)]}", flush=True)
        if r[15]:
            print(f"    BAD {word(r[15])}", flush=True)
        for w in range(4, 12):  # each consumer warp's last unit read and the barrier word then
            print(f"    read warp {w}: {word(rd[b, w, 0])}  barrier {int(rd[b, w, 1]):#018x}", flush=True)


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
