"""The experts' backward at world 1: the fused launch (MoEBackward) against the same work as
separate launches (the device path: dispatch, four grouped GEMMs, combine), and each grouped GEMM
alone, on one forward's context.

    python3 notes/debug/bwd_jobs.py [--models DeepSeek-V3] [--rows 256,2048] [--iters 10] [--crew 0]

Timed interleaved through kosmos.timing (median ms; TF/s of the GEMMs). The fused launch's jobs run
A dgrad2 (+SwiGLU backward), B wgrad2, C dgrad1, D wgrad1; the device path wgrad2, dgrad2, wgrad1,
dgrad1.
"""
import dataclasses

import cupy
import numpy as np

from ab_cases import arguments, forward_cases
from kosmos import grouped
from kosmos.dtypes import bfloat16
from kosmos.moe import MoEBackward
from kosmos.timing import time_calls

args = arguments(rows="256,2048", crew={"type": int, "default": None})
for world, name, rows, cfg, layer, params, x, dy, ctx in forward_cases(args):
    tokens = x.shape[0]
    r, f32 = ctx.routing, np.dtype(np.float32)
    fused = MoEBackward(layer._dispatch_bwd, layer._combine, f32)
    arena, g_rows, _ = layer._dispatch_bwd(dy, r, weighted=True)
    d_ye, x_e, a = arena.view(bfloat16), ctx.x_experts, ctx.h
    d_pre = grouped.grouped_matmul(d_ye, params.w2, g_rows, "NN", epilogue="swiglu_backward", gate_up=ctx.gate_up)
    total = int(g_rows.sum())
    ones = dataclasses.replace(r, weights=cupy.ones_like(r.weights))

    def separate(_):
        xe_, wd1, wd2 = layer._routed_backward_device(dy, ctx, params, f32)
        layer._combine(xe_, layer._dispatch_bwd, ones)

    h, i = cfg.hidden, cfg.intermediate
    gemms = {
        "wgrad2 NT": (lambda _: grouped.grouped_matmul(d_ye, a, g_rows, "NT", out_dtype=f32), 2 * total * h * i),
        "dgrad2 NN+swiglu": (lambda _: grouped.grouped_matmul(d_ye, params.w2, g_rows, "NN", epilogue="swiglu_backward",
                                                               gate_up=ctx.gate_up), 2 * total * h * i),
        "wgrad1 NT": (lambda _: grouped.grouped_matmul(d_pre, x_e, g_rows, "NT", out_dtype=f32), 4 * total * h * i),
        "dgrad1 NN": (lambda _: grouped.grouped_matmul(d_pre, params.w1, g_rows, "NN"), 4 * total * h * i),
    }
    calls = {"fused experts bwd": lambda _: fused(dy, r, x_e, a, ctx.gate_up, params.w1, params.w2, crew=args.crew),
             "separate experts bwd": separate, **{k: v[0] for k, v in gemms.items()}}
    t = time_calls(world, calls, args.warmup, args.iters, rounds_per_hold=2)
    print(f"{name} rows/exp {rows} tokens {tokens} routed rows {total}")
    for k, tm in t.items():
        fl = gemms[k][1] if k in gemms else 12 * total * h * i
        print(f"  {k:22s} {tm.median_ms:9.3f} ms  {fl / tm.median_ms / 1e9:7.1f} TF/s")
    print(f"  {'GEMMs summed':22s} {sum(t[k].median_ms for k in gemms):9.3f} ms", flush=True)
