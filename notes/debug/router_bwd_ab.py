"""The router's backward inside MoEBackward's launch against before it, at world 1.

    python3 notes/debug/router_bwd_ab.py [--models DeepSeek-V3] [--rows 2048] [--iters 10]

Contenders, interleaved through kosmos.timing (median ms), on one device-path forward's context:
  fused + router        MoEBackward(..., router=RouterBackward(...), x=x): one launch
  fused, router apart   the router's kernel and two GEMMs (layer._router_gradients), then
                        MoEBackward with their dx as `extra`
  fused alone           MoEBackward without the router
  router apart alone    the router's kernel and two GEMMs
(After the first call the combine buffer holds dX rows, not expert outputs: the values change,
the work does not.)
"""
import cupy
import numpy as np

from ab_cases import arguments, forward_cases
from kosmos.moe import MoEBackward, RouterBackward
from kosmos.timing import time_calls

args = arguments()
for world, name, rows, cfg, layer, params, x, dy, ctx in forward_cases(args):
    r, f32, tokens = ctx.routing, np.dtype(np.float32), x.shape[0]
    fused = MoEBackward(layer._dispatch_bwd, layer._combine, f32)
    extra = cupy.zeros((tokens, cfg.hidden), np.float32)
    status = layer._dispatch.status
    rb = RouterBackward(cfg, ctx.logits, layer._padded_router_w(params), status)
    base = (dy, r, ctx.x_experts, ctx.h, ctx.gate_up, params.w1, params.w2)

    def apart(_):
        dx_r, _ = layer._router_gradients(ctx, dy, status, params)
        return fused(*base, extra=dx_r)

    calls = {
        "fused + router": lambda _: fused(*base, router=rb, x=x),
        "fused, router apart": apart,
        "fused alone": lambda _: fused(*base, extra=extra),
        "router apart alone": lambda _: layer._router_gradients(ctx, dy, status, params),
    }
    t = time_calls(world, calls, args.warmup, args.iters, rounds_per_hold=2)
    print(f"{name} rows/exp {rows} tokens {tokens} experts {cfg.experts} top_k {cfg.top_k}")
    for k, tm in t.items():
        print(f"  {k:22s} {tm.median_ms:9.3f} ms")
