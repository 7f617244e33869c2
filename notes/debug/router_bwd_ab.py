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
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.moe import MoEBackward, MoELayer  # noqa: E402
from kosmos.moe.backward import RouterBackward  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402
from moe import capacity_of, case_params, share, tokens_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--models", default="DeepSeek-V3")
ap.add_argument("--rows", default="2048")
ap.add_argument("--iters", type=int, default=10)
ap.add_argument("--warmup", type=int, default=3)
args = ap.parse_args()
world = World()
print(f"# {device_name()}, world {world.size}; ms, median of {args.iters}")
for name in args.models.split(","):
    cfg = share(name, world.size)
    for rows in (int(r) for r in args.rows.split(",")):
        tokens = tokens_of(cfg, rows, world.size)
        cap = capacity_of(cfg, tokens, world.size)
        layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="device")
        params = case_params(world, cfg, False, 0)
        x, dy = random_bf16((tokens, cfg.hidden), 3), random_bf16((tokens, cfg.hidden), 4)
        _, ctx = layer.forward(x, params, check=True)
        r, f32 = ctx.routing, np.dtype(np.float32)
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
        layer.close()
        cupy.get_default_memory_pool().free_all_blocks()
