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
import cupy
import numpy as np

from ab_cases import arguments, forward_cases
from kosmos.moe import MoEBackward
from kosmos.moe.forward import SharedMLP
from kosmos.timing import time_calls

args = arguments()
for world, name, rows, cfg, layer, params, x, dy, ctx in forward_cases(args):
    r, f32, tokens = ctx.routing, np.dtype(np.float32), x.shape[0]
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
