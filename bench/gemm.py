"""Benchmark kosmos.matmul against cuBLAS (cupy.matmul): the paper's Llama 3 shapes and a second set.

    python3 bench/gemm.py [--quick] [--set paper|other|both] [--caps 132,116,99,66,33] [--caps-all] [--reps 20]
                          [--precision mxfp8] [--tree-b HIPSRC]

Shape sets: "paper" = kosmos/configs/llama3_shapes.yaml (5 fused kernels x 24 shapes); "other" =
OTHER_SHAPES below (small M, square, odd M, MoE expert shapes of DeepSeek-V3, Qwen3, Mixtral and
GPT-OSS), none of them in the paper. For each shape cuBLAS and ours on the full GPU, and ours under
SM caps (the paper's Figure 2 shapes, 70B MBS4 and 405B MBS8, or every shape with --caps-all; CuPy
cannot cap cuBLAS), timed through kosmos.timing: the contenders interleaved call by call (each
round in its own order), queued behind the stream blocker, device events around each call, median
of --reps after warm-up; every call takes the next of enough input sets that the L2 cannot serve
them, so no call follows one on the same inputs. "control": the chosen kernel's time with its
width forced over its time chosen -- one kernel timed twice, the noise floor of the ratios (before
session 31 the round's contenders shared one set in a fixed order and this differed by up to
1.5x, the automatic contender, right after cuBLAS, the faster: notes/gemm.md). Writes
bench/results/gemm_<gpu>_<date>.json and .png (GPU, commit, timing method recorded); prints a short
table last. --tree-b HIPSRC: the full-GPU contender (and mxfp8's) again with the kernels of another
hipsrc tree, interleaved with this tree's (per shape and per group "B/A time": B's time over A's, > 1:
A faster, as in the other benches; JSON b_time_over_a. Before session 30 this bench printed B's speed
over A's, JSON b_over_a).
--precision mxfp8 times matmul on the operands quantized with blocks along their contracting axes (NT,
the wgrad: both column-wise copies stored transposed, so a TN; kosmos.mx.quantize_both) and the
routes matmul did not choose ("(pass x)", "(regs x)", "(swapped x)" after mxfp8/bf16; kosmos.gemm.mx_route):
the data to refit kosmos.gemm.MX_A_COLUMNS_BY_CARD and mx_swap_pays.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import math
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy  # noqa: E402

from kosmos import World, gemm  # noqa: E402
from kosmos.dtypes import bf16_to_f32, bfloat16, random_bf16  # noqa: E402
from kosmos.runtime.source import in_kernel_tree  # noqa: E402
from kosmos.shapes import PaperShape, load_llama3_shapes  # noqa: E402
from kosmos.timing import check_timeable, device_name, git_commit, time_calls  # noqa: E402

L2_BYTES = 60 * 2**20
FIG2 = ("70B", "MBS4"), ("405B", "MBS8")
QUICK = {"8B-QKV-MBS1", "8B-FC1-MBS1", "70B-FC1-MBS4", "70B-QKV-MBS4", "405B-FC1-MBS8",
         "8B-Down-MBS1", "8B-OProj-MBS1", "70B-Down-MBS4", "70B-OProj-MBS4", "405B-Down-MBS8",
         "smallM-256", "smallM-1000", "square-4096", "oddM-3001", "dsv3-gemm1-2048", "qwen3-gemm2-2048"}
# name: (class, layout, M, N, K) in the paper's BLAS convention (output M x N, reduction K).
OTHER_SHAPES = {
    "smallM-256": ("small M", "TN", 256, 8192, 8192),
    "smallM-512": ("small M", "TN", 512, 8192, 8192),
    "smallM-1000": ("small M", "TN", 1000, 5120, 5120),
    "smallM-256-NN": ("small M", "NN", 256, 8192, 8192),
    "square-4096": ("square", "TN", 4096, 4096, 4096),
    "square-8192": ("square", "TN", 8192, 8192, 8192),
    "square-8192-NT": ("square", "NT", 8192, 8192, 8192),
    "oddM-3001": ("odd M", "TN", 3001, 4096, 4096),
    "oddM-12345": ("odd M", "NN", 12345, 5120, 2048),
    "dsv3-gemm1-2048": ("experts", "TN", 2048, 4096, 7168),
    "dsv3-gemm2-2048": ("experts", "TN", 2048, 7168, 2048),
    "qwen3-gemm1-2048": ("experts", "TN", 2048, 3072, 4096),
    "qwen3-gemm2-2048": ("experts", "TN", 2048, 4096, 1536),
    "qwen3-30b-gemm2-2048": ("experts", "TN", 2048, 2048, 768),
    "mixtral-gemm1-2048": ("experts", "TN", 2048, 28672, 4096),
    "gptoss-gemm1-2048": ("experts", "TN", 2048, 5760, 2880),
    "dsv3-wgrad-2048": ("experts", "NT", 4096, 7168, 2048),
}


def other_shapes() -> list[PaperShape]:
    return [PaperShape(cls, name, m, n, k, layout) for name, (cls, layout, m, n, k) in OTHER_SHAPES.items()]


def cublas_fn(layout, a, b, out):
    if layout == "TN":
        return lambda: cupy.matmul(a, b.T, out=out)
    if layout == "NN":
        return lambda: cupy.matmul(a, b, out=out)
    return lambda: cupy.matmul(a.T, b, out=out)


def mx_copies(layout, a, b):
    """(a, b, layout) of the MXFP8 GEMM: a and b quantized (kosmos.mx.quantize_both) with blocks along
    their contracting axes. NT (a wgrad) takes both column-wise copies stored transposed, as a TN
    does: its operands K-major, A dequantized in the mainloop like TN's."""
    from kosmos import mx

    if layout == "NT":
        return mx.quantize_both(a, transpose_columns=True)[1], mx.quantize_both(b, transpose_columns=True)[1], "TN"
    return (*(mx.quantize_both(x)[0 if gemm.contracting_axis(layout, i) == 1 else 1] for i, x in enumerate((a, b))),
            layout)


def mx_routes(shape) -> list[str]:
    """The MXFP8 routes (kosmos.gemm.mx_route) a GEMM of two MXFP8 operands can take whatever the
    card's column limit: the swap only where its swapped form exists (kosmos.gemm.mx_swap_fits)."""
    return ["pass", "regs"] + (["swapped"] if gemm.mx_swap_fits(shape) else [])


def run_mx_route(route, a, b, layout, out):
    """matmul of MXFP8 a, b forced down one route (bench only: the column limit lifted or zeroed)."""
    chosen = gemm.MX_A_MAX_COLUMNS
    gemm.MX_A_MAX_COLUMNS = 0 if route == "pass" else 1 << 30
    try:
        if route == "swapped":
            gemm._matmul_mx_a_swapped(a, b, out, None, None, None)
        elif route == "regs":
            gemm._matmul_mx_a(a, b, layout, out, None, None, None, None)
        else:
            gemm.matmul(a, b, layout, out=out)
    finally:
        gemm.MX_A_MAX_COLUMNS = chosen


def bench_shape(world, s, caps, reps, warmup, do_caps, sms, split_k=1, mxfp8=False, tree_b=None):
    a_shape, b_shape, out_shape = s.operand_shapes()
    set_bytes = 2 * (math.prod(a_shape) + math.prod(b_shape))
    nsets = max(2, min(8, math.ceil(3 * L2_BYTES / set_bytes)))
    sets = [(random_bf16(a_shape, 2 * i + 1), random_bf16(b_shape, 2 * i + 2)) for i in range(nsets)]
    out = cupy.empty(out_shape, dtype=bfloat16)
    ref = cupy.empty(out_shape, dtype=bfloat16)
    flop = s.flops
    rec = {"kernel": s.kernel, "name": s.name, "layout": s.layout, "M": s.m, "N": s.n, "K": s.k, "sets": nsets}
    cublas = [cublas_fn(s.layout, a, b, ref) for a, b in sets]
    # Every call takes the next input set, whatever the contender: no call follows one on the same
    # inputs, whose L2 leftovers would speed it (session 31: with the round's set shared by all
    # contenders, two running the same kernel differed by up to 1.5x; kosmos.timing.round_order).
    calls = itertools.count()

    def operands(pool=sets):
        return pool[next(calls) % nsets]

    fns = {"cublas": lambda i: cublas[next(calls) % nsets]()}
    cap_list = [None] + ([c for c in caps if c < sms] if do_caps else [])
    for cap in cap_list:
        def run(i, cap=cap):
            a, b = operands()
            gemm.matmul(a, b, s.layout, out=out, sm_cap=cap, split_k=split_k)
        fns[str(sms if cap is None else cap)] = run
    if gemm.arch_path() == "wgmma":  # every tile width forced, to check (and refit) the chooser
        for width in gemm.TILE_WIDTHS:
            def run_w(i, width=width):
                a, b = operands()
                gemm.matmul(a, b, s.layout, out=out, split_k=split_k, tile_n=width)
            fns[f"w{width}"] = run_w
        tm, tn, ks = gemm.tile_counts(gemm.gemm_shape(s.layout, a_shape, b_shape), 256)
        if split_k == 1 and gemm.stream_k_split(tm * tn, sms, ks) is not None:  # stream-K forced
            def run_sk(i):
                a, b = operands()
                gemm.matmul(a, b, s.layout, out=out, stream_k=True)
            fns["sk"] = run_sk
    if mxfp8:  # matmul on MXFP8 operands: A dequantized in the mainloop (NT as TN), B permuted
        mx_sets = [mx_copies(s.layout, a, b) for a, b in sets]
        fns["mxfp8"] = lambda i: gemm.matmul(*operands(mx_sets), out=out, split_k=split_k)
        a0, b0, mx_layout = mx_sets[0]
        if (mx_layout in gemm.MX_A_LAYOUTS and gemm.arch_path() == "wgmma"  # the routes matmul did not take,
                and split_k in (1, None)):  # to refit MX_A_COLUMNS_BY_CARD and mx_swap_pays (split-K: the pass)
            mx_shape = gemm.gemm_shape(mx_layout, a0.data.shape, b0.data.shape)
            rec["mxfp8_route"] = gemm.mx_route(mx_shape, True, 2, split_k, None, None, True, gemm.mx_a_max_columns())
            for route in mx_routes(mx_shape):
                if route != rec["mxfp8_route"]:
                    fns[f"mxfp8 {route}"] = lambda i, route=route: run_mx_route(route, *operands(mx_sets), out)
    if tree_b:  # the full-GPU contenders again with another tree's kernels ("<name> B"), interleaved
        for k in [str(sms)] + (["mxfp8"] if mxfp8 else []):
            fns[f"{k} B"] = in_kernel_tree(tree_b, fns[k])
    t = time_calls(world, fns, warmup, reps)
    rec["cublas"] = {"ms": t["cublas"].median_ms, "min_ms": t["cublas"].min_ms,
                     "tflops": flop / t["cublas"].median_ms / 1e9}
    rec["ours"] = {k: {"ms": v.median_ms, "min_ms": v.min_ms, "host_us": v.host_us, "tflops": flop / v.median_ms / 1e9}
                   for k, v in t.items() if k != "cublas"}
    # Same inputs (the last set) through both: a sanity check of the timed kernel, not a test.
    gemm.matmul(sets[-1][0], sets[-1][1], s.layout, out=out, split_k=split_k)
    plan = gemm.get_plan(gemm.gemm_shape(s.layout, a_shape, b_shape), bfloat16, None, split_k)
    rec["split_k"], rec["tile_n"] = plan.splits, plan.tile_n
    twin = f"w{plan.tile_n}"
    if plan.stream_k is None and plan.splits == 1 and twin in rec["ours"]:  # the same kernel, timed twice
        rec["control"] = rec["ours"][twin]["ms"] / rec["ours"][str(sms)]["ms"]
    cublas[-1]()
    o32, r32 = bf16_to_f32(out), bf16_to_f32(ref)
    rec["rel_diff_vs_cublas"] = float(cupy.linalg.norm(o32 - r32) / cupy.linalg.norm(r32))
    full = rec["ours"][str(sms)]["tflops"]
    rec["ratio"] = full / rec["cublas"]["tflops"]
    rec["cap_retention"] = {k: v["tflops"] / full for k, v in rec["ours"].items() if not k.startswith(("w", "mxfp8"))
                            and k != "sk" and not k.endswith(" B")}
    if mxfp8:
        rec["mxfp8_vs_bf16"] = rec["ours"]["mxfp8"]["tflops"] / full
        rec["mxfp8_other_path_vs_bf16"] = {k[6:]: v["tflops"] / full for k, v in rec["ours"].items()
                                           if k.startswith("mxfp8 ") and not k.endswith(" B")}
    if tree_b:
        rec["b_time_over_a"] = {k[:-2]: rec["ours"][k[:-2]]["tflops"] / v["tflops"] for k, v in rec["ours"].items()
                                if k.endswith(" B")}  # same FLOPs: A's speed over B's
    del sets, out, ref, o32, r32
    cupy.get_default_memory_pool().free_all_blocks()
    return rec


def auto_vs_best(rec, sms):
    """The automatic choice's speed over the best of the forced contenders (widths, stream-K)."""
    forced = [v["tflops"] for k, v in rec["ours"].items() if k.startswith("w") or k == "sk"]
    auto = rec["ours"][str(sms)]["tflops"]
    return auto / max(forced + [auto])


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def plot(results, path, sms):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_shapes = [r for r in results if len(r["cap_retention"]) > 1]
    n = max(1, len(fig_shapes))
    cols = min(5, n)
    rows = -(-n // cols) + 1
    fig = plt.figure(figsize=(4 * cols, 3.2 * rows))
    for i, r in enumerate(fig_shapes):
        ax = fig.add_subplot(rows, cols, i + 1)
        caps = sorted(int(k) for k in r["cap_retention"])
        ax.plot(caps, [r["ours"][str(c)]["tflops"] for c in caps], "o-", label="kosmos")
        ax.axhline(r["cublas"]["tflops"], color="gray", ls="--", label=f"cuBLAS ({sms} SMs)")
        ax.set_title(f"{r['layout']} {r['kernel']} {r['M']}x{r['N']}x{r['K']}", fontsize=8)
        ax.set_xlabel("SM cap")
        ax.set_ylabel("TFLOP/s")
        ax.legend(fontsize=6)
    ax = fig.add_subplot(rows, 1, rows)
    ax.bar(range(len(results)), [r["ratio"] for r in results],
           color=[{"TN": "C0", "NN": "C1", "NT": "C2"}[r["layout"]] for r in results])
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_ylabel("kosmos / cuBLAS")
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{r['kernel']}:{r['name']}" for r in results], rotation=90, fontsize=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset: 10 paper shapes, 6 others")
    ap.add_argument("--set", default="paper", choices=("paper", "other", "both"))
    ap.add_argument("--caps", default="132,116,99,66,33")
    ap.add_argument("--caps-all", action="store_true", help="SM caps on every shape, not only Figure 2's")
    ap.add_argument("--kernels", default="", help="comma list of kernels (ag_tn,tn_rs,ag_nn,bulk_ag_nn,bulk_rs_nt)")
    ap.add_argument("--shapes", default="", help="comma list of shape names")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--define", action="append", default=[], help="compile define for the gemm module, NAME=VALUE")
    ap.add_argument("--split-k", default="1", help="1 (default), auto, or a factor")
    ap.add_argument("--tree-b", default="", help="a hipsrc tree: the full-GPU contenders (and mxfp8) again with "
                    "its kernels, named '<name> B', interleaved with this tree's (an A/B of a kernel change in one run)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "mxfp8"),
                    help="mxfp8: also time matmul on MXFP8 operands (kosmos.matmul's MXFP8 paths) against ours in bf16")
    args = ap.parse_args(argv)

    caps = [int(c) for c in args.caps.split(",") if c]
    if args.define:
        gemm._extra_options = tuple(f"-D{d}" for d in args.define)
    shapes = (load_llama3_shapes() if args.set != "other" else []) + (other_shapes() if args.set != "paper" else [])
    if args.kernels:
        shapes = [s for s in shapes if s.kernel in args.kernels.split(",")]
    if args.shapes:
        shapes = [s for s in shapes if s.name in args.shapes.split(",")]
    if args.quick:
        shapes = [s for s in shapes if s.name in QUICK]
    with World() as world:
        check_timeable(world)
        if world.size != 1:
            raise SystemExit("bench/gemm.py times one GPU: run it without mpirun (world size 1)")
        gpu, commit = device_name(), git_commit()
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        print(f"# {gpu}, {sms} SMs, gemm path {gemm.arch_path()}, commit {commit}, defines {args.define}", flush=True)
        results = []
        for s in shapes:
            do_caps = args.caps_all or any(m in s.name and b in s.name for m, b in FIG2) or (
                args.quick and "MBS8" in s.name)
            split = None if args.split_k == "auto" else int(args.split_k)
            rec = bench_shape(world, s, caps, args.reps, args.warmup, do_caps, sms, split, args.precision == "mxfp8",
                              args.tree_b or None)
            results.append(rec)
            capstr = " ".join(f"{k}:{v:.2f}" for k, v in rec["cap_retention"].items() if k != str(sms))
            print(f"{s.kernel:11s} {s.layout} {s.name:20s} {s.m:6d} {s.n:6d} {s.k:6d}  cuBLAS {rec['cublas']['tflops']:6.1f}"
                  f"  ours {rec['ours'][str(sms)]['tflops']:6.1f}  ratio {rec['ratio']:.3f}  diff {rec['rel_diff_vs_cublas']:.1e}"
                  f"  split {rec['split_k']}  tile {rec['tile_n']}"
                  + (f"  control {rec['control']:.3f}" if "control" in rec else "")
                  + "".join(f"  {w} {rec['ours'][w]['tflops']:6.1f}" for w in [f"w{n}" for n in gemm.TILE_WIDTHS] + ["sk"]
                            if w in rec["ours"])
                  + (f"  mxfp8/bf16 {rec['mxfp8_vs_bf16']:.3f} {rec.get('mxfp8_route', '')}" if "mxfp8_vs_bf16" in rec
                     else "")
                  + "".join(f"  ({k} {v:.3f})" for k, v in rec.get("mxfp8_other_path_vs_bf16", {}).items())
                  + "".join(f"  B/A time {k} {v:.3f}" for k, v in rec.get("b_time_over_a", {}).items())
                  + f"  {capstr}", flush=True)

    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gemm_{gpu.replace(' ', '_')}_{date}{('_' + args.tag) if args.tag else ''}"
    doc = {"gpu": gpu, "sms": sms, "world": 1, "commit": commit, "date": date, "path": gemm.arch_path(),
           "defines": args.define, "split_k": args.split_k, "reps": args.reps, "warmup": args.warmup,
           "quick": args.quick, "set": args.set, "precision": args.precision, "tree_b": args.tree_b or None,
           "timing": "kosmos.timing.time_calls: contenders interleaved (each round in its own order), events behind"
                     " the stream blocker, median; every call on the next input set",
           "results": results}
    (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    try:
        plot(results, out_dir / f"{stem}.png", sms)
    except Exception as e:  # a plot failure must not lose the numbers
        print(f"plot failed: {e}")

    print(f"\n# summary ({gpu}, commit {doc['commit']}) -> {out_dir / stem}.json")
    print(f"{'group':14s} {'n':>3s} {'geomean':>8s} {'min':>6s} {'ours TF':>8s} {'cuBLAS TF':>9s}  cap116/full"
          "  auto/best (the choosers against the best forced width or stream-K)")
    groups = {}
    for r in results:
        groups.setdefault(r["kernel"], []).append(r)
        groups.setdefault("layout " + r["layout"], []).append(r)
    for g, rs in groups.items():
        ret = [r["cap_retention"]["116"] for r in rs if "116" in r["cap_retention"]]
        print(f"{g:14s} {len(rs):3d} {geomean([r['ratio'] for r in rs]):8.3f} {min(r['ratio'] for r in rs):6.3f} "
              f"{geomean([r['ours'][str(sms)]['tflops'] for r in rs]):8.1f} {geomean([r['cublas']['tflops'] for r in rs]):9.1f}"
              f"  {('%.3f' % geomean(ret)) if ret else '-'}"
              f"  {geomean([auto_vs_best(r, sms) for r in rs]):.3f}"
              + (f"  mxfp8/bf16 {geomean([r['mxfp8_vs_bf16'] for r in rs]):.3f}" if args.precision == "mxfp8" else "")
              + "".join(f"  B/A time {k} {geomean([r['b_time_over_a'][k] for r in rs]):.3f}"
                        for k in (rs[0].get("b_time_over_a") or {})))
    control = [r["control"] for r in results if "control" in r]
    if control:  # how far apart two timings of one kernel land: the noise floor of every ratio above
        print(f"control: the chosen kernel timed twice (its width forced), time over time, {len(control)} shapes: "
              f"geomean {geomean(control):.3f}, {min(control):.3f} .. {max(control):.3f}")


if __name__ == "__main__":
    main()
