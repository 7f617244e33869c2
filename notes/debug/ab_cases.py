"""What the world-1 backward A/B scripts here share (bwd_jobs.py, shared_bwd_ab.py,
router_bwd_ab.py): their arguments, and one device-path forward per (model, rows per expert) of
one EP-8 rank's share (bench/moe.py's cases), its layer closed after the caller's timing."""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import cupy  # noqa: E402

from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.moe import MoELayer  # noqa: E402
from kosmos.timing import device_name  # noqa: E402
from kosmos.world import World  # noqa: E402
from moe import capacity_of, case_params, share, tokens_of  # noqa: E402


def arguments(rows: str = "2048", **extra: dict) -> argparse.Namespace:
    """--models, --rows, --iters, --warmup, and `extra` (name -> add_argument keywords)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="DeepSeek-V3")
    ap.add_argument("--rows", default=rows)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    for name, kw in extra.items():
        ap.add_argument(f"--{name}", **kw)
    return ap.parse_args()


def forward_cases(args: argparse.Namespace):
    """Yields (world, name, rows, cfg, layer, params, x, dy, ctx) after a checked device-path
    forward; closes the layer and frees the pool when the caller moves on."""
    world = World()
    print(f"# {device_name()}, world {world.size}; ms, median of {args.iters}")
    for name in args.models.split(","):
        cfg = share(name, world.size)
        for rows in (int(r) for r in args.rows.split(",")):
            tokens = tokens_of(cfg, rows, world.size)
            layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=capacity_of(cfg, tokens, world.size),
                             path="device")
            try:
                params = case_params(world, cfg, False, 0)
                x, dy = random_bf16((tokens, cfg.hidden), 3), random_bf16((tokens, cfg.hidden), 4)
                _, ctx = layer.forward(x, params, check=True)
                yield world, name, rows, cfg, layer, params, x, dy, ctx
            finally:
                layer.close()
                cupy.get_default_memory_pool().free_all_blocks()
