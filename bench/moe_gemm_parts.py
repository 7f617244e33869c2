"""Each expert GEMM of the MoE layer alone, ours (kosmos.grouped_matmul) against cuBLAS on the same
FLOPs (cupy.matmul over all the routed rows as one group), world 1: where the layer's GEMM time goes.

    python3 bench/moe_gemm_parts.py [--models Qwen3-30B-A3B,DeepSeek-V3] [--rows 256,2048] [--tree-b HIPSRC]

Shapes are bench/moe.py's one-EP-8-rank shares, every expert given the same rows. Median of 20
timed calls after 3 of warm-up, contenders interleaved (kosmos.timing). The cuBLAS contender of a
grouped wgrad writes one expert's dW, ours every expert's: at few rows per expert ours moves E times
the output bytes for the same FLOPs. GB/s: the bytes a part must move at least (each operand read
once, its output written once) over its time; at few rows per expert the expert weights dominate
them, and this, not TF/s, says how near the HBM the part runs. --tree-b HIPSRC: each of ours again with another hipsrc tree's
kernels, interleaved in the same run ("B/A time": B's time over A's; > 1: A is faster).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import moe as bench_moe  # noqa: E402 - bench/moe.py: share()
from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402
from kosmos.runtime.source import in_kernel_tree  # noqa: E402
from kosmos.timing import time_calls  # noqa: E402
from one_gpu import one_gpu  # noqa: E402


def gemm_parts(name: str, rows_per: int) -> tuple[dict, dict]:
    """Model `name`'s share at `rows_per` rows per expert: (ours, dense). ours: part name -> (call,
    FLOPs / (R H I), its cuBLAS contender's name, bytes / (R H I): every operand read once and the
    output written once, the HBM floor of a part whose weights do not fit in L2); dense: contender
    name -> call. Calls take one ignored argument (kosmos.timing's). Also notes/debug/parts_ncu.py's
    profile target."""
    import cupy

    cfg = bench_moe.share(name)
    e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
    r = e * rows_per
    rows = cupy.full((e,), rows_per, cupy.int32)
    xe, dye = random_bf16((r, h), 1), random_bf16((r, h), 2)
    a, dpre, pre = random_bf16((r, i), 3), random_bf16((r, 2 * i), 4), random_bf16((r, 2 * i), 5)
    w1, w2 = random_bf16((e, 2 * i, h), 6), random_bf16((e, h, i), 7)
    kept = cupy.empty((r, 2 * i), a.dtype)
    f32 = np.float32
    # bytes moved at least, in units of R H I: bf16 elements are 2 bytes, fp32 4; e experts' weights
    rhi = r * h * i
    x_, w1_, w2_, a_, d2_ = r * h, e * 2 * i * h, e * h * i, r * i, r * 2 * i  # element counts
    ours = {  # name: (call, FLOPs / (R H I), the cuBLAS contender, bytes / (R H I))
        "fwd1 plain": (lambda _: grouped_matmul(xe, w1, rows, "TN"), 4, "fwd1",  # [gate, up] stored as is
                       2 * (x_ + w1_ + d2_) / rhi),
        "fwd1 swiglu": (lambda _: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu"), 4, "fwd1",
                        2 * (x_ + w1_ + a_) / rhi),
        "fwd1 keep": (lambda _: grouped_matmul(xe, w1, rows, "TN", epilogue="swiglu", gate_up=kept), 4, "fwd1",
                      2 * (x_ + w1_ + a_ + d2_) / rhi),
        "fwd2": (lambda _: grouped_matmul(a, w2, rows, "TN"), 2, "fwd2", 2 * (a_ + w2_ + x_) / rhi),
        "wgrad2 f32": (lambda _: grouped_matmul(dye, a, rows, "NT", out_dtype=f32), 2, "wgrad2",
                       (2 * (x_ + a_) + 4 * w2_) / rhi),
        "wgrad2 bf16": (lambda _: grouped_matmul(dye, a, rows, "NT"), 2, "wgrad2", 2 * (x_ + a_ + w2_) / rhi),
        "dgrad2 swiglu": (lambda _: grouped_matmul(dye, w2, rows, "NN", epilogue="swiglu_backward", gate_up=pre),
                          2, "dgrad2", 2 * (x_ + w2_ + d2_ + d2_) / rhi),
        "dgrad2 plain": (lambda _: grouped_matmul(dye, w2, rows, "NN"), 2, "dgrad2", 2 * (x_ + w2_ + a_) / rhi),
        "wgrad1 f32": (lambda _: grouped_matmul(dpre, xe, rows, "NT", out_dtype=f32), 4, "wgrad1",
                       (2 * (d2_ + x_) + 4 * w1_) / rhi),
        "wgrad1 bf16": (lambda _: grouped_matmul(dpre, xe, rows, "NT"), 4, "wgrad1", 2 * (d2_ + x_ + w1_) / rhi),
        "dgrad1": (lambda _: grouped_matmul(dpre, w1, rows, "NN"), 4, "dgrad1", 2 * (d2_ + w1_ + x_) / rhi),
    }
    w1_0, w2_0 = w1[0], w2[0]
    dense = {"fwd1": lambda _: cupy.matmul(xe, w1_0.T), "fwd2": lambda _: cupy.matmul(a, w2_0.T),
             "wgrad2": lambda _: cupy.matmul(dye.T, a), "dgrad2": lambda _: cupy.matmul(dye, w2_0),
             "wgrad1": lambda _: cupy.matmul(dpre.T, xe), "dgrad1": lambda _: cupy.matmul(dpre, w1_0)}
    return ours, dense


def parts(world, name: str, rows_per: int, tree_b: str = "") -> None:
    cfg = bench_moe.share(name)
    e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
    r = e * rows_per
    ours, dense = gemm_parts(name, rows_per)
    fns = {k: v[0] for k, v in ours.items()}
    if tree_b:
        fns.update({k + " B": in_kernel_tree(tree_b, f) for k, f in list(fns.items())})
    t = time_calls(world, {**fns, **{"cublas " + k: v for k, v in dense.items()}}, 3, 20, rounds_per_hold=4)
    print(f"{cfg.name} rows/expert {rows_per} (E {e}, H {h}, I {i}, R {r})", flush=True)
    for k, (_, units, d, moved) in ours.items():
        m, c = t[k].median_ms, t["cublas " + d].median_ms
        print(f"  {k:14s} ours {m:8.3f} ms {units * r * h * i / m / 1e9:6.0f} TF/s "
              f"{moved * r * h * i / m / 1e6:5.0f} GB/s   cublas {c:8.3f} ms  "
              f"cublas/ours {c / m:5.2f}" + (f"   B/A time {t[k + ' B'].median_ms / m:5.3f}" if tree_b else ""),
              flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="Qwen3-30B-A3B,DeepSeek-V3")
    ap.add_argument("--rows", default="256,2048", help="rows per expert")
    ap.add_argument("--tree-b", default="", help="a hipsrc tree whose kernels run beside ours (an A/B)")
    args = ap.parse_args(argv)
    import cupy

    with one_gpu("bench/moe_gemm_parts.py") as (world, _commit):
        for name in args.models.split(","):
            for rows_per in (int(v) for v in args.rows.split(",")):
                parts(world, name, rows_per, args.tree_b)
                cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
