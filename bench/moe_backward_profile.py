"""Where MoELayer.backward's time goes, host-timed, world 1: a device sync around each wrapped call
(the grouped GEMMs, our GEMMs, the bf16/f32 conversions, dispatch, combine, the router backward,
each kernel of hipsrc/moe_backward.hip). A diagnostic, not a benchmark: the syncs inflate short
calls that would overlap when queued (bench/moe.py --backward gives the timings).

    python3 bench/moe_backward_profile.py [DeepSeek-V3:2048 Qwen3-30B-A3B:2048 ...]

Cases are (model, rows per expert) of bench/moe.py's one-EP-8-rank shares.
"""
from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kosmos.moe.layer as layer_mod  # noqa: E402
import moe as bench_moe  # noqa: E402 - bench/moe.py: share(), tokens_of()
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.moe import MoELayer, MoEParams  # noqa: E402
from kosmos.world import World  # noqa: E402

spent: dict[str, float] = collections.defaultdict(float)


def sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def timed(fn, label):
    def call(*a, **k):
        sync()
        t = time.perf_counter()
        r = fn(*a, **k)
        sync()
        spent[label] += time.perf_counter() - t
        return r
    return call


def instrument() -> None:
    L = layer_mod
    for obj, name, label in ((L.grouped, "grouped_matmul", "grouped"), (L.gemm, "matmul", "gemm.matmul"),
                             (L.MoELayer, "_router_gradients", "router"), (L, "bf16_to_f32", "bf16_to_f32"),
                             (L, "f32_to_bf16", "f32_to_bf16"), (L.MoEDispatch, "__call__", "dispatch"),
                             (L.MoECombine, "__call__", "combine")):
        setattr(obj, name, timed(getattr(obj, name), label))
    kernels = L._backward_kernels

    def timed_kernels(world):
        get = kernels(world)
        return lambda name: timed(get(name), name.replace("kosmos_moe_", "k:"))
    L._backward_kernels = timed_kernels


def main(argv: list[str]) -> int:
    import cupy

    cases = [(a.split(":")[0], int(a.split(":")[1])) for a in argv] or [("DeepSeek-V3", 2048), ("Qwen3-30B-A3B", 2048)]
    instrument()
    with World() as world:
        for name, rows in cases:
            cfg = bench_moe.share(name)
            tokens = bench_moe.tokens_of(cfg, rows)
            layer = MoELayer(world, cfg, max_tokens=tokens, path="device")
            p = MoEParams.random(cfg, world, 1)
            x, dy = random_bf16((tokens, cfg.hidden), 3), random_bf16((tokens, cfg.hidden), 4)
            for _ in range(3):  # the last of three (compiles and pools warm)
                _, ctx = layer.forward(x, p)
                sync()
                spent.clear()
                t = time.perf_counter()
                layer.backward(dy, ctx, p)
                sync()
                total = time.perf_counter() - t
            parts = "  ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
            print(f"{name} {rows} rows/expert: backward {total * 1e3:.2f} ms: {parts}  rest "
                  f"{(total - sum(spent.values())) * 1e3:.2f}", flush=True)
            layer.close()
            del layer, ctx
            cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
