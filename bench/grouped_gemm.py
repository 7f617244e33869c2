"""Grouped GEMM (kosmos.grouped_matmul) vs a per-expert cupy.matmul loop vs one dense cuBLAS GEMM.

    python3 bench/grouped_gemm.py [--quick] [--iters 20] [--rows 256,512,2048,4096] [--tree-b HIPSRC]

One EP-8 rank's share of each model's experts (local experts E, hidden H, expert width I):
GEMM1 Y[R, 2I] = X[R, H] W1[e]^T (gate and up, stored) and GEMM2 Y[R, H] = A[R, I] W2[e]^T, at
rows per expert `--rows`, balanced (every expert the same rows) and skewed (the same total rows,
expert loads from a geometric ramp whose largest is about 4x its smallest); --sweep: E = 8...256
experts with also half of them empty and every row on one expert. Contenders, timed
interleaved call by call through kosmos.timing (device events behind the stream blocker; --iters
timed calls after warm-up, the blocker held for rounds short enough for the driver's launch queue,
median of all of them): ours (one launch, counts read on the device); the loop (one
cupy.matmul per expert, counts known to the host for free); dense (one cuBLAS GEMM of the same
total rows and the same FLOPs: the upper bound a grouped GEMM aims at). --tree-b HIPSRC: ours
again with another hipsrc tree's kernels, interleaved ("B/A time": B's time over ours; > 1: ours
is faster). Writes JSON and
a PNG.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import geometric_mean

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kosmos.dtypes import bf16_to_f32, random_bf16  # noqa: E402
from kosmos.grouped import get_plan, grouped_matmul, grouped_shape  # noqa: E402
from kosmos.runtime.source import in_kernel_tree  # noqa: E402
from kosmos.timing import device_name, rounds_per_hold_for, time_calls  # noqa: E402
from one_gpu import add_timing_args, one_gpu, write_results  # noqa: E402

# name: (local experts at EP 8, hidden, expert intermediate width)
MODELS = {"DeepSeek-V3": (32, 7168, 2048), "Qwen3-235B": (16, 4096, 1536), "Qwen3-30B": (16, 2048, 768)}


ROUTINGS = ("balanced", "skewed", "half_empty", "one_hot")


def routing_counts(experts: int, per_expert: int, kind: str) -> np.ndarray:
    """Rows per expert summing to experts * per_expert: balanced; skewed (a ~4x geometric ramp);
    half_empty (every other expert has no rows, the rest twice); one_hot (every row to expert 0)."""
    total = experts * per_expert
    if kind == "balanced":
        return np.full(experts, per_expert, np.int32)
    if kind == "half_empty":
        c = np.zeros(experts, np.int64)
        c[::2] = total // len(c[::2])
        c[0] += total - c.sum()
        return c.astype(np.int32)
    if kind == "one_hot":
        c = np.zeros(experts, np.int32)
        c[0] = total
        return c
    if kind != "skewed":
        raise ValueError(f"routing must be one of {ROUTINGS}, got {kind!r}")
    w = 4.0 ** (np.arange(experts) / max(1, experts - 1))
    c = np.floor(w / w.sum() * total).astype(np.int64)
    c[-1] += total - c.sum()
    return c.astype(np.int32)


def bench_case(world, experts, rows_per, n, k, kind, iters, warmup, seed, tree_b=""):
    import cupy

    counts = routing_counts(experts, rows_per, kind)
    total = int(counts.sum())
    x = random_bf16((total, k), seed)
    w = random_bf16((experts, n, k), seed + 1)
    out = cupy.empty((total, n), x.dtype)
    out_loop = cupy.empty((total, n), x.dtype)  # its own: the sanity check below compares the two
    c_dev = cupy.asarray(counts)
    starts = np.concatenate([[0], np.cumsum(counts)])
    wd = random_bf16((n, k), seed + 2)
    out_d = cupy.empty((total, n), x.dtype)
    # Each contender reads its own copies (same values): none follows a call that left its
    # operands in L2 (session 31, notes/gemm.md: up to 1.5x between twins in bench/gemm.py).
    x_loop, w_loop, x_dense = x.copy(), w.copy(), x.copy()

    def ours(i):
        grouped_matmul(x, w, c_dev, "TN", out=out)

    def loop(i):
        for e in range(experts):
            lo, hi = int(starts[e]), int(starts[e + 1])
            if hi > lo:
                cupy.matmul(x_loop[lo:hi], w_loop[e].T, out=out_loop[lo:hi])

    def dense(i):
        cupy.matmul(x_dense, wd.T, out=out_d)

    # The loop queues one launch per expert (cuBLAS may add one): a round of the contenders queues
    # ~2 E + 4 launches, so a hold takes as many rounds as kosmos.timing's queue budget allows.
    per_round = rounds_per_hold_for(1, iters, entries_per_call=2 * experts + 4)
    fns = {"ours": ours, "loop": loop, "dense": dense}
    if tree_b:  # its own copies too
        x_b, w_b, out_b = x.copy(), w.copy(), cupy.empty_like(out)
        fns["ours B"] = in_kernel_tree(tree_b, lambda i: grouped_matmul(x_b, w_b, c_dev, "TN", out=out_b))
    t = {name: (v.median_ms, v.min_ms, v.host_us)
         for name, v in time_calls(world, fns, warmup, iters, rounds_per_hold=per_round).items()}
    # Sanity (not a test): ours against the loop on the same operands.
    o32, r32 = bf16_to_f32(out), bf16_to_f32(out_loop)
    diff = float(cupy.linalg.norm(o32 - r32) / cupy.linalg.norm(r32))
    flops = grouped_shape("TN", x.shape, w.shape, experts).flops(total)
    rec = {"E": experts, "rows_per_expert": rows_per, "routing": kind, "N": n, "K": k, "total_rows": total,
           "max_rows": int(counts.max()), "rel_diff_vs_loop": diff,
           "tile_n": get_plan(grouped_shape("TN", x.shape, w.shape, experts), x.dtype).tile_n}
    rec["rounds"], rec["iters_per_round"] = -(-iters // per_round), per_round
    for name, (ms, lo, host_us) in t.items():
        rec[name] = {"ms": ms, "min_ms": lo, "host_us": host_us, "tflops": flops / ms / 1e9}
    rec["vs_dense"] = rec["ours"]["tflops"] / rec["dense"]["tflops"]
    rec["vs_loop"] = rec["ours"]["tflops"] / rec["loop"]["tflops"]
    if tree_b:
        rec["b_over_a"] = rec["ours B"]["ms"] / rec["ours"]["ms"]
    del x, w, out, out_loop, wd, out_d, o32, r32, x_loop, w_loop, x_dense, fns
    if tree_b:
        del x_b, w_b, out_b
    cupy.get_default_memory_pool().free_all_blocks()
    return rec


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
    labels = [f"{r['model']} {r['gemm']} {r['rows_per_expert']} {r['routing'][:4]}" for r in rows]
    for ax, key, title in ((axes[0], "vs_dense", "ours / dense cuBLAS (same FLOPs)"),
                           (axes[1], "vs_loop", "ours / per-expert cupy.matmul loop")):
        ax.bar(range(len(rows)), [r[key] for r in rows],
               color=["C0" if r["routing"] == "balanced" else "C1" for r in rows])
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_title(title)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=90, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rows per expert 256 and 2048 only")
    ap.add_argument("--rows", default="256,512,2048,4096")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tree-b", default="", help="a hipsrc tree whose kernels run beside ours (an A/B)")
    ap.add_argument("--sweep", action="store_true",
                    help="instead of the models: E = 8, 32, 128, 256 experts (N 4096, K 2048), every routing")
    add_timing_args(ap)
    args = ap.parse_args(argv)
    rows_list = [256, 2048] if args.quick else [int(r) for r in args.rows.split(",")]
    with one_gpu("bench/grouped_gemm.py") as (world, commit):
        results = []
        if args.sweep:
            cases = [(f"sweep-E{e}", e, "GEMM", 4096, 2048, ROUTINGS) for e in (8, 32, 128, 256)]
        else:
            cases = [(model, MODELS[model][0], gemm_name, n, k, ("balanced", "skewed"))
                     for model in args.models.split(",")
                     for gemm_name, n, k in (("GEMM1", 2 * MODELS[model][2], MODELS[model][1]),
                                             ("GEMM2", MODELS[model][1], MODELS[model][2]))]
        for model, experts, gemm_name, n, k, routings in cases:
            for rows_per in rows_list:
                for kind in routings:
                    rec = bench_case(world, experts, rows_per, n, k, kind, args.iters, args.warmup,
                                     seed=len(results) * 3 + 1, tree_b=args.tree_b)
                    rec.update(model=model, gemm=gemm_name)
                    results.append(rec)
                    print(f"{model:12s} {gemm_name} E{experts:3d} rows/exp {rows_per:5d} {kind:10s} "
                          f"ours {rec['ours']['tflops']:6.1f}  loop {rec['loop']['tflops']:6.1f}  "
                          f"dense {rec['dense']['tflops']:6.1f} TF/s  vs dense {rec['vs_dense']:.3f}  "
                          f"vs loop {rec['vs_loop']:.2f}  tile {rec['tile_n']}"
                          + (f"  B/A time {rec['b_over_a']:.3f}" if args.tree_b else ""), flush=True)
        stem = write_results(args, "grouped_gemm", commit, results)
        try:
            plot(results, stem.with_suffix(".png"))
        except Exception as e:  # a plot failure must not lose the numbers
            print(f"plot failed: {e}")
        print(f"\n# summary ({device_name()}, commit {commit}) -> {stem}.json")
        print(f"{'rows/expert':>11s} {'routing':>8s} {'n':>3s} {'vs dense (geo)':>14s} {'min':>6s} {'vs loop (geo)':>13s}")
        for rows_per in rows_list:
            for kind in ROUTINGS:
                rs = [r for r in results if r["rows_per_expert"] == rows_per and r["routing"] == kind]
                if not rs:
                    continue
                print(f"{rows_per:11d} {kind:>8s} {len(rs):3d} {geometric_mean([r['vs_dense'] for r in rs]):14.3f} "
                      f"{min(r['vs_dense'] for r in rs):6.3f} {geometric_mean([r['vs_loop'] for r in rs]):13.2f}")


if __name__ == "__main__":
    main()
