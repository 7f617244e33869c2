"""The shared MLP's backward inside MoEBackward's launch against beside it, at world 1.

    python3 notes/debug/shared_bwd_ab.py [--models DeepSeek-V3] [--rows 2048] [--iters 10]

Contenders, interleaved through kosmos.timing (median ms), on one device-path forward's context:
  fused + shared jobs   MoEBackward(..., shared=SharedMLP(...), x=x): one launch
  fused, shared apart   the shared MLP's four standalone GEMMs (layer._shared_backward), then
                        MoEBackward without it
  fused alone           MoEBackward without the shared MLP
  shared GEMMs alone    the four standalone GEMMs
(`extra` is accumulated into on every call: its values drift, the work does not.)
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
from kosmos.moe.forward import SharedMLP  # noqa: E402
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
        sh = SharedMLP(params.shared_w1, params.shared_w2, *ctx.shared)
        base = (dy, r, ctx.x_experts, ctx.h, ctx.gate_up, params.w1, params.w2)

        calls = {
            "fused + shared jobs": lambda _: fused(*base, extra=extra, shared=sh, x=x),
            "fused, shared apart": lambda _: (layer._shared_backward(dy, ctx, params, f32, extra),
                                              fused(*base, extra=extra)),
            "fused alone": lambda _: fused(*base, extra=extra),
            "shared GEMMs alone": lambda _: layer._shared_backward(dy, ctx, params, f32, extra),
        }
        t = time_calls(world, calls, args.warmup, args.iters, rounds_per_hold=2)
        print(f"{name} rows/exp {rows} tokens {tokens} shared width {cfg.shared_width}")
        for k, tm in t.items():
            print(f"  {k:22s} {tm.median_ms:9.3f} ms")
        layer.close()
        cupy.get_default_memory_pool().free_all_blocks()
