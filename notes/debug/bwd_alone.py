"""Whether the fused MoE backward's time in bench/moe.py (fused step - fused forward, interleaved)
is its launch's: the backward alone, repeated on one forward's context, timed interleaved with the
step and the forward (world 1: the backward's combine leaves every row in place there, so the
forward's combine buffer and expert outputs that the router's backward reads stay as the forward
left them, and every later forward rewrites them with the same values: each call does the same
work). Session 25's trace put the launch at 22.0 ms where the bench said 24.0-24.5 (DeepSeek-V3,
2,048 rows, H200).

    python3 notes/debug/bwd_alone.py [--models DeepSeek-V3,Qwen3-30B-A3B] [--rows 2048] [--iters 10]
"""
import numpy as np

from ab_cases import arguments
from kosmos.dtypes import float32, random_bf16
from kosmos.moe import MoELayer
from kosmos.timing import device_name, time_calls
from kosmos.world import World
from moe import capacity_of, case_params, share, tokens_of

args = arguments(rows="2048")
world = World()
assert world.size == 1, "world 1 only (elsewhere the backward's pushes rewrite the forward's combine buffer)"
print(f"# {device_name()}, world 1; ms, median of {args.iters}")
for name in args.models.split(","):
    cfg = share(name, 1)
    for rows in (int(r) for r in args.rows.split(",")):
        tokens = tokens_of(cfg, rows, 1)
        layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=capacity_of(cfg, tokens, 1), path="fused")
        try:
            params = case_params(world, cfg, False, 0)
            x, dy = random_bf16((tokens, cfg.hidden), 3), random_bf16((tokens, cfg.hidden), 4)
            _, ctx = layer.forward(x, params, check=True)
            layer.backward(dy, ctx, params)  # builds the launch
            _, ctx = layer.forward(x, params, check=True)
            status, wdt = layer._dispatch.status, np.dtype(float32)

            def step(_):
                _y, c = layer.forward(x, params)
                layer.backward(dy, c, params)

            t = time_calls(world, {"step": step, "forward": lambda _: layer.forward(x, params),
                                   "backward alone": lambda _: layer._fused_backward(dy, ctx, params, wdt, status)},
                           args.warmup, args.iters, rounds_per_hold=2)
            ms = {k: v.median_ms for k, v in t.items()}
            print(f"{name} rows/exp {rows}: step {ms['step']:.3f}  forward {ms['forward']:.3f}  step - forward "
                  f"{ms['step'] - ms['forward']:.3f}  backward alone {ms['backward alone']:.3f}", flush=True)
        finally:
            layer.close()
