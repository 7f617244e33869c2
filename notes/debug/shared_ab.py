"""The shared experts' MLP inside the fused forward's launch against the same launch with that MLP
run before it (two GEMM launches, its fp32 output handed to the fold: session 18's fused path), and
the device path, at world 1.

    python3 notes/debug/shared_ab.py [--models DeepSeek-V3,Llama-4-Scout] [--rows 256,2048] [--iters 20]

One MoELayer(path="fused"): "in launch" is layer.forward; "apart" runs layer._shared (the device
path's two GEMMs) first and gives the launch empty shared jobs and that output for its fold (the
fold then reads what it read before session 19); "device" is path "device". Timed interleaved
through kosmos.timing (median ms); the outputs of the three are compared bitwise first.
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
from kosmos.moe.forward import null_heads  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402
from kosmos.world import World  # noqa: E402
from moe import capacity_of, case_params, share, tokens_of  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--models", default="DeepSeek-V3,Llama-4-Scout")
ap.add_argument("--rows", default="256,2048")
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
args = ap.parse_args()
world = World()
print(f"# {device_name()}, world {world.size}; ms, median of {args.iters}")
print(f"{'model':16s} {'rows/exp':>8s} {'tokens':>7s} {'in launch':>10s} {'apart':>10s} {'device':>10s} "
      f"{'apart/in':>8s} {'dev/in':>7s}")
for name in args.models.split(","):
    cfg = share(name, world.size)
    for rows in (int(r) for r in args.rows.split(",")):
        tokens = tokens_of(cfg, rows, world.size)
        cap = capacity_of(cfg, tokens, world.size)
        fused = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="fused")
        apart_layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="fused")
        device = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="device")
        params = case_params(world, cfg, False, 0)
        x = random_bf16((tokens, cfg.hidden), 3)
        fwd = apart_layer._forward

        def apart(_):
            y_s, _kept = apart_layer._shared(x, params)
            fwd._shared_heads = lambda *_a: (null_heads(*fwd.epilogues[3:]), y_s)
            return apart_layer._forward_device(x, params, None)[0]

        y_in = fused.forward(x, params, check=True)[0].view(np.uint16).copy()
        y_apart = apart(0).view(np.uint16).copy()
        y_dev = device.forward(x, params, check=True)[0].view(np.uint16).copy()
        same = bool((y_in == y_apart).all()) and bool((y_in == y_dev).all())
        t = time_calls(world, {"in": lambda _: fused.forward(x, params), "apart": apart,
                               "dev": lambda _: device.forward(x, params)}, args.warmup, args.iters,
                       rounds_per_hold=4)
        i, a, d = (t[k].median_ms for k in ("in", "apart", "dev"))
        print(f"{name:16s} {rows:8d} {tokens:7d} {i:10.3f} {a:10.3f} {d:10.3f} {a / i:8.3f} {d / i:7.3f}"
              f"{'' if same else '   OUTPUTS DIFFER'}", flush=True)
        for lay in (fused, apart_layer, device):
            lay.close()
        cupy.get_default_memory_pool().free_all_blocks()
