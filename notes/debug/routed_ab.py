"""The routing inside the fused forward's launch against the same launch given the routing of the
separate launches (router GEMM + kosmos.moe.route), and the device path, at world 1.

    python3 notes/debug/routed_ab.py [--models Qwen3-30B-A3B,DeepSeek-V3] [--rows 256,2048] [--iters 20]

One MoELayer(path="fused"): "in launch" is layer.forward (its default, router to fold in one
launch), "outside" runs the router GEMM and route() first and hands their plan to the same kernel
(layer._route + layer._forward_device); "device" is path "device" (every step a launch of its own).
Timed interleaved through kosmos.timing (median ms); the outputs of the three are compared bitwise
first.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.moe import MoELayer  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402
from moe import capacity_of, case_params, share, tokens_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--models", default="Qwen3-30B-A3B,DeepSeek-V3")
ap.add_argument("--rows", default="256,2048")
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
args = ap.parse_args()
world = World()
print(f"# {device_name()}, world {world.size}; ms, median of {args.iters}")
print(f"{'model':16s} {'rows/exp':>8s} {'in launch':>10s} {'outside':>10s} {'device':>10s} {'out/in':>7s} {'dev/in':>7s}")
for name in args.models.split(","):
    cfg = share(name, world.size)
    for rows in (int(r) for r in args.rows.split(",")):
        tokens = tokens_of(cfg, rows, world.size)
        cap = capacity_of(cfg, tokens, world.size)
        fused = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="fused")
        device = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="device")
        params = case_params(world, cfg, False, 0)
        x = random_bf16((tokens, cfg.hidden), 3)

        def outside(_):
            return fused._forward_device(x, params, fused._route(x, params)[1])[0]

        y_in = fused.forward(x, params, check=True)[0].view(np.uint16).copy()
        y_out = outside(0).view(np.uint16).copy()
        y_dev = device.forward(x, params, check=True)[0].view(np.uint16).copy()
        same = bool((y_in == y_out).all()) and bool((y_in == y_dev).all())
        t = time_calls(world, {"in": lambda _: fused.forward(x, params), "out": outside,
                               "dev": lambda _: device.forward(x, params)}, args.warmup, args.iters,
                       rounds_per_hold=4)
        i, o, d = (t[k].median_ms for k in ("in", "out", "dev"))
        print(f"{name:16s} {rows:8d} {i:10.3f} {o:10.3f} {d:10.3f} {o / i:7.3f} {d / i:7.3f}"
              f"{'' if same else '   OUTPUTS DIFFER'}", flush=True)
        fused.close()
        device.close()
        cupy.get_default_memory_pool().free_all_blocks()
