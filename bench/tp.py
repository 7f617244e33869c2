"""TP+SP fused kernels vs NCCL + cuBLAS back to back vs our own unfused kernels, on Llama 3 shapes.

    python3 bench/tp.py [--quick] [--kernels ag_tn,tn_rs] [--iters 20]       # world size 1: overhead
    mpirun -np 8 python3 bench/tp.py                                          # the real thing
    mpirun -np 8 python3 bench/tp.py --ablate                                 # role policies, queue orders
    mpirun -np 8 python3 bench/tp.py --precision mxfp8 [--link-bytes]         # MXFP8 operands (bytes measured)
    python3 bench/tp.py --quick --tree-b /tmp/tree_main/hipsrc                # A/B of a kernel change
    python3 bench/tp.py --quick --tile-n 128 --tree-b /tmp/tree_b/hipsrc      # ... of one tile width

Shapes: kosmos/configs/llama3_shapes.yaml (the paper's Tables C.3-C.12, M tokens in total, TP 8
widths); each rank holds M / world tokens. Per shape and kernel: the fused op (one launch), the
baseline (NCCL collective and cuBLAS through CuPy, back to back on one stream), and "unfused"
(our collective kernel and our persistent GEMM back to back). Slowest rank's median of --iters
timed calls after warm-up, the contenders interleaved call by call (device time: the calls are
queued behind a blocking kernel; the host's cost per call is reported beside it). At world size
1 nothing moves, and the comparison that matters is fused vs our plain GEMM (the cost of the
queues and flags). Writes JSON and a PNG.

--precision mxfp8: the operands are MXFP8 (quantized once before the timed calls, each along its
GEMM's contracting axis); the all-gathers move E4M3 codes + E8M0 scales, and the baseline and
"unfused" gather those bytes (NCCL / our collective) before our MXFP8 GEMM (dequantize + bf16
builder); the reduce-scatters move bf16 in both precisions. The row dgrad (ag_nn) is the MXFP8
AG+NN(+NT) kernel: both copies of dY gathered, the dgrad and the wgrad (its contenders run both
GEMMs too, and the flops count both). Bytes moved per call are recorded: computed from the shapes,
and with --link-bytes measured from the NVLink data counters around a few fused calls where the
GPUs have them (bench/link_counters.py); the summary prints measured / computed per kernel
(MXFP8's all-gathers should move 33/64 of bf16's bytes: a ratio ~ 1 says they do).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from kosmos import World, gemm, mx  # noqa: E402
from kosmos.collectives import AllGather, ReduceScatter  # noqa: E402
from kosmos.dtypes import bfloat16, random_bf16  # noqa: E402
from kosmos.reference import NcclBaseline  # noqa: E402
from kosmos.shapes import load_llama3_shapes  # noqa: E402
from kosmos.runtime.source import in_kernel_tree, kernel_tree  # noqa: E402
from kosmos.timing import check_timeable, device_name, git_commit, time_calls  # noqa: E402
from link_counters import measure_link_bytes  # noqa: E402
from kosmos.tp.ops import (AllGatherMatmul, AllGatherMatmulNNNT, BulkAllGatherMatmul,  # noqa: E402
                           BulkReduceScatterMatmul, MatmulReduceScatter)

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = {"8B-QKV-MBS1", "8B-FC1-MBS1", "70B-FC1-MBS2", "70B-QKV-MBS2", "405B-FC1-MBS1", "8B-Down-MBS1",
         "8B-OProj-MBS1", "70B-Down-MBS2", "70B-OProj-MBS2", "405B-Down-MBS1"}
ABLATIONS = {
    "ag_tn": [dict(policy="fixed"), dict(policy="two_way"), dict(ag_order="chunk_major"), dict(ag_order="naive"),
              dict(mover_threads=128)],
    "ag_nn": [dict(policy="fixed"), dict(policy="two_way"), dict(ag_order="chunk_major"), dict(ag_order="naive")],
    "tn_rs": [dict(policy="fixed"), dict(rs_order="row_major")],
    "bulk_ag_nn": [dict(policy="fixed")],
    "bulk_rs_nt": [dict(policy="fixed")],
}
# MXFP8's row dgrad is AG+NN(+NT): one-way or fixed, its own order (no two_way, no ag_order)
MX_ABLATIONS = {**ABLATIONS, "ag_nn": [dict(policy="fixed")]}


def op_dims(kernel: str, M: int, N: int, K: int, P: int) -> tuple[int, int, int]:
    """The paper's (M, N, K) of a kernel's GEMM -> our ops' (m rows per rank, n, k)."""
    if kernel in ("ag_tn", "tn_rs"):
        return M // P, N, K
    if kernel in ("ag_nn", "bulk_ag_nn"):
        return M // P, K, N  # dY[m, n=K] @ W[K, N]
    return K // P, M, N      # bulk_rs_nt: dW[M, N] = dY[K, M]^T @ X[K, N], K tokens


class Case:
    """Operands and the three contenders for one (kernel, shape)."""

    def __init__(self, world: World, kernel: str, m: int, n: int, k: int, nccl, switches: dict | None = None):
        import cupy

        P, self.kernel = world.size, kernel
        s = 1000 * world.rank
        sw = switches or {}
        if kernel in ("ag_tn", "ag_nn"):
            layout = "TN" if kernel == "ag_tn" else "NN"
            row = k if layout == "TN" else n
            x, w = random_bf16((m, row), s + 1), random_bf16((n, k), 2, 0.05)
            op = AllGatherMatmul(world, m, n, k, layout=layout, **sw)
            out, full = cupy.empty(op.out_shape, bfloat16), cupy.empty((P * m, row), bfloat16)
            ag = AllGather(world, (m, row), bfloat16)
            self.fused = lambda i: op(x, w, out)
            self.unfused = lambda i: gemm.matmul(ag(x, full), w, layout, out=out)
            self.gemm = lambda i: gemm.matmul(full, w, layout, out=out)
            if nccl:
                wt = w.T if layout == "TN" else w
                self.base = lambda i: cupy.matmul(nccl.all_gather(x, full), wt, out=out)
            self.flops = 2 * P * m * n * k
        elif kernel == "tn_rs":
            x, w = random_bf16((P * m, k), s + 1), random_bf16((n, k), s + 2, 0.05)
            op = MatmulReduceScatter(world, m, n, k, **sw)
            part, out = cupy.empty((P * m, n), bfloat16), cupy.empty((m, n), bfloat16)
            rs = ReduceScatter(world, (P * m, n), bfloat16)
            self.fused = lambda i: op(x, w, out)
            self.unfused = lambda i: rs(gemm.matmul(x, w, "TN", out=part), out)
            self.gemm = lambda i: gemm.matmul(x, w, "TN", out=part)
            if nccl:
                self.base = lambda i: nccl.reduce_scatter(cupy.matmul(x, w.T, out=part), out)
            self.flops = 2 * P * m * n * k
        elif kernel == "bulk_ag_nn":
            x, dy, w = random_bf16((m, k), s + 1), random_bf16((P * m, n), s + 3), random_bf16((n, k), 2, 0.05)
            op = BulkAllGatherMatmul(world, m, n, k, **sw)
            full, dx = cupy.empty((P * m, k), bfloat16), cupy.empty((P * m, k), bfloat16)
            ag = AllGather(world, (m, k), bfloat16)
            self.fused = lambda i: op(x, dy, w, dx)  # X_full: a new array (alone: x itself)
            self.unfused = lambda i: (ag(x, full), gemm.matmul(dy, w, "NN", out=dx))
            self.gemm = lambda i: gemm.matmul(dy, w, "NN", out=dx)
            if nccl:
                self.base = lambda i: (nccl.all_gather(x, full), cupy.matmul(dy, w, out=dx))
            self.flops = 2 * P * m * n * k
        else:
            dxp, dy, xf = (random_bf16((P * m, k), s + 1), random_bf16((P * m, n), s + 3),
                           random_bf16((P * m, k), s + 4))
            op = BulkReduceScatterMatmul(world, m, n, k, **sw)
            dx, dw = cupy.empty((m, k), bfloat16), cupy.empty((n, k), bfloat16)
            rs = ReduceScatter(world, (P * m, k), bfloat16)
            self.fused = lambda i: op(dxp, dy, xf, dw=dw)  # dX: a new array (alone: dXp itself)
            self.unfused = lambda i: (rs(dxp, dx), gemm.matmul(dy, xf, "NT", out=dw))
            self.gemm = lambda i: gemm.matmul(dy, xf, "NT", out=dw)
            if nccl:
                self.base = lambda i: (nccl.reduce_scatter(dxp, dx), cupy.matmul(dy.T, xf, out=dw))
            self.flops = 2 * P * m * n * k
        self.op = op
        self.plans = [op, ag if kernel in ("ag_tn", "ag_nn", "bulk_ag_nn") else rs]

        self.link_bytes = (P - 1) * m * (k if kernel in ("ag_tn", "bulk_ag_nn") else n) * 2 if P > 1 else 0
        if kernel in ("tn_rs", "bulk_rs_nt"):
            self.link_bytes = (P - 1) * m * (n if kernel == "tn_rs" else k) * 2

    def close(self) -> None:
        """Collective: free the plans' symmetric heaps now (the bench builds hundreds of plans)."""
        for plan in self.plans:
            plan.close()


class MxCase(Case):
    """The same contenders with MXFP8 operands (the fused ops' precision="mxfp8")."""

    def __init__(self, world: World, kernel: str, m: int, n: int, k: int, nccl, switches: dict | None = None):
        import cupy

        P, self.kernel = world.size, kernel
        s = 1000 * world.rank
        sw = switches or {}
        q = mx.quantize_both  # (blocks along rows, blocks along columns)

        def gather_mx(t, ag_codes, ag_scales, full, gather_fn=None):
            """An MXFP8 shard gathered as bytes (codes, scales) by our collective or NCCL."""
            if gather_fn is None:
                return mx.DeviceMX(ag_codes(t.data, full[0]), ag_scales(t.scales, full[1]), t.axis)
            return mx.DeviceMX(gather_fn(t.data, full[0]), gather_fn(t.scales, full[1]), t.axis)

        def gathered_like(t):
            return (cupy.zeros((P * t.data.shape[0], t.data.shape[1]), cupy.uint8),
                    cupy.zeros((P * t.scales.shape[0], t.scales.shape[1]), cupy.uint8))

        self.flops = 2 * P * m * n * k
        if kernel == "ag_nn":
            dy_rows, dy_cols = q(random_bf16((m, n), s + 1))
            w = q(random_bf16((n, k), 2, 0.05))[1]
            x = q(random_bf16((P * m, k), s + 4))[1]
            op = AllGatherMatmulNNNT(world, m, n, k, **sw)
            dx, dw = cupy.empty((P * m, k), bfloat16), cupy.empty((n, k), bfloat16)
            full_r, full_c = gathered_like(dy_rows), gathered_like(dy_cols)
            gs = [AllGather(world, t.shape, cupy.uint8) for t in (dy_rows.data, dy_rows.scales, dy_cols.scales)]
            self.plans = list(gs)

            def gemms(rows_full, cols_full):
                gemm.matmul(rows_full, w, "NN", out=dx)
                gemm.matmul(cols_full, x, "NT", out=dw)

            self.fused = lambda i: op(dy_rows, dy_cols, w, x, dx, dw)
            self.unfused = lambda i: gemms(gather_mx(dy_rows, gs[0], gs[1], full_r), gather_mx(dy_cols, gs[0], gs[2], full_c))
            self.gemm = lambda i: gemms(mx.DeviceMX(*full_r, 1), mx.DeviceMX(*full_c, 0))
            if nccl:
                self.base = lambda i: gemms(gather_mx(dy_rows, None, None, full_r, nccl.all_gather),
                                            gather_mx(dy_cols, None, None, full_c, nccl.all_gather))
            self.link_bytes = (P - 1) * 2 * (dy_rows.data.size + dy_rows.scales.size)
            self.flops *= 2
        elif kernel in ("ag_tn", "bulk_ag_nn"):
            bulk = kernel == "bulk_ag_nn"
            layout = "NN" if bulk else "TN"
            x = q(random_bf16((m, k), s + 1))[1 if bulk else 0]  # bulk: X for the wgrad, blocks along M
            w = q(random_bf16((n, k), 2, 0.05))[0 if layout == "TN" else 1]
            full = gathered_like(x)
            ag_c, ag_s = AllGather(world, x.data.shape, cupy.uint8), AllGather(world, x.scales.shape, cupy.uint8)
            self.plans = [ag_c, ag_s]
            if bulk:
                dy = q(random_bf16((P * m, n), s + 3))[0]
                op = BulkAllGatherMatmul(world, m, n, k, precision="mxfp8", **sw)
                dx = cupy.empty((P * m, k), bfloat16)
                self.fused = lambda i: op(x, dy, w, dx)
                self.unfused = lambda i: (gather_mx(x, ag_c, ag_s, full), gemm.matmul(dy, w, "NN", out=dx))
                self.gemm = lambda i: gemm.matmul(dy, w, "NN", out=dx)
                if nccl:
                    self.base = lambda i: (gather_mx(x, None, None, full, nccl.all_gather), gemm.matmul(dy, w, "NN", out=dx))
            else:
                op = AllGatherMatmul(world, m, n, k, layout=layout, precision="mxfp8", **sw)
                out = cupy.empty(op.out_shape, bfloat16)
                x_full = mx.DeviceMX(*full, x.axis)
                self.fused = lambda i: op(x, w, out)
                self.unfused = lambda i: gemm.matmul(gather_mx(x, ag_c, ag_s, full), w, layout, out=out)
                self.gemm = lambda i: gemm.matmul(x_full, w, layout, out=out)
                if nccl:
                    self.base = lambda i: gemm.matmul(gather_mx(x, None, None, full, nccl.all_gather), w, layout, out=out)
            self.link_bytes = (P - 1) * (x.data.size + x.scales.size)
        elif kernel == "tn_rs":
            x, w = q(random_bf16((P * m, k), s + 1))[0], q(random_bf16((n, k), s + 2, 0.05))[0]
            op = MatmulReduceScatter(world, m, n, k, **sw)
            part, out = cupy.empty((P * m, n), bfloat16), cupy.empty((m, n), bfloat16)
            rs = ReduceScatter(world, (P * m, n), bfloat16)
            self.plans = [rs]
            self.fused = lambda i: op(x, w, out)
            self.unfused = lambda i: rs(gemm.matmul(x, w, "TN", out=part), out)
            self.gemm = lambda i: gemm.matmul(x, w, "TN", out=part)
            if nccl:
                self.base = lambda i: nccl.reduce_scatter(gemm.matmul(x, w, "TN", out=part), out)
            self.link_bytes = (P - 1) * m * n * 2
        else:
            dxp = random_bf16((P * m, k), s + 1)
            dy, xf = q(random_bf16((P * m, n), s + 3))[1], q(random_bf16((P * m, k), s + 4))[1]
            op = BulkReduceScatterMatmul(world, m, n, k, **sw)
            dx, dw = cupy.empty((m, k), bfloat16), cupy.empty((n, k), bfloat16)
            rs = ReduceScatter(world, (P * m, k), bfloat16)
            self.plans = [rs]
            self.fused = lambda i: op(dxp, dy, xf, dw=dw)
            self.unfused = lambda i: (rs(dxp, dx), gemm.matmul(dy, xf, "NT", out=dw))
            self.gemm = lambda i: gemm.matmul(dy, xf, "NT", out=dw)
            if nccl:
                self.base = lambda i: (nccl.reduce_scatter(dxp, dx), gemm.matmul(dy, xf, "NT", out=dw))
            self.link_bytes = (P - 1) * m * k * 2
        self.op = op
        self.plans.insert(0, op)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 shapes per kernel")
    ap.add_argument("--kernels", default="ag_tn,tn_rs,ag_nn,bulk_ag_nn,bulk_rs_nt")
    ap.add_argument("--shapes", default="", help="comma list of shape names")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ablate", action="store_true", help="also time each ablation switch")
    ap.add_argument("--allow-oversubscribed", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--precision", default="bf16", choices=("bf16", "mxfp8"))
    ap.add_argument("--link-bytes", action="store_true", help="also measure each shipped op's bytes over NVLink "
                    "(bench/link_counters.py: two nvidia-smi calls a rank a case)")
    ap.add_argument("--tree-b", default="", help="a hipsrc tree: the shipped fused op again, built with that "
                    "tree's kernels ('fused B'), interleaved (an A/B of a kernel change; 'B/A' = its time over fused's)")
    ap.add_argument("--tile-n", type=int, default=0, choices=(0, *gemm.TILE_WIDTHS),
                    help="every GEMM (the fused ops' and the plain one) on 128 x this tile, whole tiles, not "
                    "the chooser's tiling (Hopper; 0: the chooser's): a tile width's A/B or the chooser's refit")
    args = ap.parse_args(argv)
    import cupy

    if args.tile_n:  # the one place the fused ops and kosmos.matmul take their tiling from
        gemm.choose_tiling = lambda shape, ctas, widths, stream_k_ok: (args.tile_n, None)

    with World() as world:
        check_timeable(world, args.allow_oversubscribed)
        P, say = world.size, (print if world.rank == 0 else (lambda *a, **k: None))
        nccl = NcclBaseline(world) if NcclBaseline.available(world) else None
        shapes = [s for s in load_llama3_shapes() if s.kernel in args.kernels.split(",")]
        if args.quick:
            shapes = [s for s in shapes if s.name in QUICK]
        if args.shapes:
            shapes = [s for s in shapes if s.name in args.shapes.split(",")]
        say(f"bench/tp: {device_name()}, world {P}, commit {git_commit()}, {len(shapes)} shapes", flush=True)
        rows = []
        for s in shapes:
            m, n, k = op_dims(s.kernel, s.m, s.n, s.k, P)
            if m % 128:
                say(f"skip {s.kernel} {s.name}: {m} tokens per rank is not a multiple of 128")
                continue
            variants = [("shipped", {})] + ([(",".join(f"{a}={b}" for a, b in sw.items()), sw)
                                             for sw in (MX_ABLATIONS if args.precision == "mxfp8" else ABLATIONS)[s.kernel]]
                                            if args.ablate else [])
            for label, sw in variants:
                case_cls = MxCase if args.precision == "mxfp8" else Case
                case = case_cls(world, s.kernel, m, n, k, nccl, sw)
                contenders = {"fused": case.fused}
                case_b = None
                if label == "shipped":
                    contenders.update(unfused=case.unfused, gemm=case.gemm, **({"base": case.base} if nccl else {}))
                    if args.tree_b:  # built and called with tree B's kernels (its plans load them when built)
                        with kernel_tree(args.tree_b):
                            case_b = case_cls(world, s.kernel, m, n, k, nccl, sw)
                        contenders["fused B"] = in_kernel_tree(args.tree_b, case_b.fused)
                t = time_calls(world, contenders, args.warmup, args.iters)
                moved = measure_link_bytes(world, case.fused) if args.link_bytes and label == "shipped" else None
                row = {"kernel": s.kernel, "shape": s.name, "m": m, "n": n, "k": k, "variant": label,
                       "tile_n": case.op.tile_n, "stream_k": case.op.stream_k is not None,
                       "precision": args.precision, "link_bytes_per_rank": case.link_bytes,
                       "link_bytes_measured": moved, "crew": case.op.describe(),
                       **{f"{a}_ms": b.median_ms for a, b in t.items()},
                       **{f"{a}_host_us": b.host_us for a, b in t.items()}}
                rows.append(row)
                if case_b is not None:
                    row["b_over_a"] = t["fused B"].median_ms / t["fused"].median_ms
                say(f"{s.kernel:11s} {s.name:16s} {label:22s} " + "  ".join(f"{a} {b.median_ms:8.3f}" for a, b in t.items())
                    + "  host us " + "/".join(f"{b.host_us:.0f}" for b in t.values())
                    + (f"  B/A {row['b_over_a']:.3f}" if case_b is not None else "")
                    + (f"  link MB rx {moved['rx'] / 1e6:.1f} / {case.link_bytes / 1e6:.1f} computed" if moved else ""),
                    flush=True)
                case.close()
                if case_b is not None:
                    case_b.close()
                del case, case_b
                cupy.get_default_memory_pool().free_all_blocks()
        result = {"gpu": device_name(), "world_size": P, "oversubscribed": world.oversubscribed,
                  "precision": args.precision, "tree_b": args.tree_b or None, "forced_tile_n": args.tile_n or None,
                  "commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
        if world.rank == 0 and rows:
            args.out.mkdir(parents=True, exist_ok=True)
            stem = (f"tp_w{P}" + ("_ablate" if args.ablate else "") + ("_mxfp8" if args.precision == "mxfp8" else "")
                    + (f"_tile{args.tile_n}" if args.tile_n else ""))
            (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
            summarize(result, args.out / f"{stem}.png")
        if nccl:
            nccl.close()
    return 0


def summarize(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shipped = [r for r in result["rows"] if r["variant"] == "shipped"]
    print(f"\n{'kernel':11s} {'shapes':>6s} {'fused/gemm':>11s} {'base/fused':>11s} {'unfused/fused':>14s}  (geometric means)")
    fig, ax = plt.subplots(figsize=(10, 4))
    for kernel in dict.fromkeys(r["kernel"] for r in shipped):
        rs = [r for r in shipped if r["kernel"] == kernel]
        g = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
        over = g([r["fused_ms"] / r["gemm_ms"] for r in rs])
        base = g([r["base_ms"] / r["fused_ms"] for r in rs]) if "base_ms" in rs[0] else float("nan")
        unf = g([r["unfused_ms"] / r["fused_ms"] for r in rs])
        measured = [r for r in rs if r.get("link_bytes_measured") and r["link_bytes_per_rank"]]
        ratios = [r["link_bytes_measured"]["rx"] / r["link_bytes_per_rank"] for r in measured]
        link = f"  link rx measured / computed {g(ratios):.3f}" if measured else ""
        print(f"{kernel:11s} {len(rs):6d} {over:11.3f} {base:11.3f} {unf:14.3f}{link}")
        key = "base_ms" if "base_ms" in rs[0] and result["world_size"] > 1 else "gemm_ms"
        ax.plot([r["shape"] for r in rs], [r[key] / r["fused_ms"] for r in rs], "o-", label=kernel)
    ax.axhline(1.0, color="gray", ls="--")
    ax.set_ylabel("speedup of fused over " + ("NCCL+cuBLAS" if result["world_size"] > 1 else "plain GEMM"))
    ax.set_title(f"{result['gpu']}, world {result['world_size']}, commit {result['commit']}")
    ax.tick_params(axis="x", rotation=90, labelsize=6)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
