"""The MoE layer forward (kosmos.moe.MoELayer, path "device") against its own expert GEMMs alone and
an equal-FLOP dense cuBLAS GEMM, at world size 1 or over P ranks, one GPU each.

    python3 bench/moe.py [--quick] [--rows 256,2048] [--models DeepSeek-V3,Qwen3-235B-A22B] [--iters 20]
    mpirun -np 8 python3 bench/moe.py --quick            # the whole model, expert-parallel over 8 GPUs

P EP-8 ranks' share of each model (kosmos/configs/moe_models.yaml): P E/8 experts with their H and
I, E/8 on each rank (P = 8: the model itself); the tokens route top-min(k, P E/8) over them (the
model's k wherever the share has k experts: the routing rule is the model's), each rank with as
many tokens as give `--rows` rows per expert on average -- so a rank's tokens, its routed-expert
GEMM work, its shared experts' work and the rows its fold sums per token are those of the 8-GPU
model at every P (issue 12: "same tokens and top-k"). (Until session 24 the share routed
top-max(1, P k/8), so at P = 1 it had 8x the tokens at top-1: the same routed GEMMs, 8x the shared
experts' and the router's per-token work; JSON records before then carry that top_k.) The layers'
capacity is 3x a rank's mean rows (dropless at P = 1); `--skew`
adds a linear per-expert bias ramp (models with expert_bias only; each case records its min and max
rows per expert). Contenders, timed interleaved call by call through kosmos.timing (device
events behind the stream blocker): layer (path "device": router GEMM, routing, dispatch, both
grouped GEMMs, the shared expert, combine and fold as separate launches, no host round trip);
fused m=M [c=C] (path "fused": router to fold in one launch, MoEForward, with M dispatch movers
and C combine crew; `--movers 8,33,auto --crew 0,16`; `--drop 1.0,1.25` adds each with token dropping
at those capacity factors, recording the most pairs a rank dropped);
experts (every expert GEMM of the layer alone: the two grouped GEMMs on the same counts and the
shared expert's); dense (cuBLAS on the same FLOPs: the routed rows' two GEMMs and the shared
experts'); without the stream blocker (host gaps included, as a user sees them): layer unheld
and baseline (path "baseline": counts over MPI, rows by NCCL, cupy.matmul per expert). Times are
the slowest rank's; TFLOP/s are per GPU (the ranks' mean FLOPs).
`--phases` (world 1) also times each part alone (router GEMM + routing, dispatch, routed grouped
GEMMs, shared expert, combine + fold). `--backward` times the backward instead (bench_backward).
`--tree-b PATH` adds each path "fused" contender once more with the kernels of another hipsrc tree
("<name> B"), interleaved with this tree's: an A/B of a kernel change inside one run.
Issue 12's targets: layer within 5 % of experts, experts >= 0.85 of dense; issue 13's: the
backward within 5 % of its GEMMs alone, its GEMMs >= 0.85 of dense. Writes JSON (GPU, commit, world
size; per case the bytes the busiest rank pushes to other ranks per forward, bytes_out_max, and the
mean, bytes_out_mean; what the fused forward moved over the links, measured from the NVLink data
counters where the GPUs have them (link_bytes_measured: tx and rx a call, the ranks' mean;
bench/link_counters.py); the bytes a layer holds, layer_bytes) and a PNG of TFLOP/s per contender
beside it.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from kosmos.dtypes import random_bf16  # noqa: E402
from kosmos.grouped import grouped_matmul  # noqa: E402
from kosmos.moe import MoEConfig, MoELayer, MoEParams, load_models  # noqa: E402
from kosmos.runtime.source import kernel_tree  # noqa: E402
from kosmos.timing import device_name, time_calls  # noqa: E402
from link_counters import measure_link_bytes  # noqa: E402
from one_gpu import add_timing_args, gpu_per_rank, write_results  # noqa: E402

DEFAULT_MODELS = ("DeepSeek-V3", "Qwen3-235B-A22B", "Qwen3-30B-A3B")
PHASES = ("router", "dispatch", "routed", "shared", "combine")


def share(name: str, ranks: int = 1) -> MoEConfig:
    """`ranks` EP-8 ranks' share of the model: ranks * E/8 experts, top-min(k, ranks * E/8)."""
    cfg = load_models()[name]
    if not 1 <= ranks <= 8:
        raise SystemExit(f"bench/moe.py runs 1 to 8 ranks (shares of an EP-8 layout), not {ranks}")
    e = cfg.experts // 8 * ranks
    groups = cfg.groups if cfg.groups and e % cfg.groups == 0 and e // cfg.groups >= 2 else 0
    label = f"{name}/EP8" if ranks == 1 else (name if ranks == 8 else f"{name}/EP8x{ranks}")
    return dataclasses.replace(cfg, name=label, experts=e, top_k=min(cfg.top_k, e),
                               groups=groups, topk_groups=min(cfg.topk_groups, groups) if groups else 0)


def tokens_of(cfg, rows_per, ranks: int = 1):
    """Tokens per rank that give rows_per rows per expert on average."""
    return rows_per * cfg.experts // (cfg.top_k * ranks)


def capacity_of(cfg, tokens: int, ranks: int) -> int:
    """Rows a rank may receive: dropless at one rank; at P ranks 3x the mean (the dropless bound,
    P T min(k, E/P), would size every arena P times over the rows that come)."""
    dropless = ranks * tokens * min(cfg.top_k, cfg.experts // ranks)
    return min(dropless, 3 * tokens * cfg.top_k)


def bytes_out(all_counts, rank: int, e_loc: int, row_bytes: int) -> int:
    """Bytes rank `rank` pushes to other ranks in one forward (the backward's are the same): its
    rows to the other experts' owners (dispatch) and its experts' rows back to the other ranks
    (combine). all_counts [P, E]: the rows each source sends each expert (MoEDispatch.all_counts)."""
    import numpy as np

    c = np.asarray(all_counts, dtype=np.int64)
    p = c.shape[0]
    to_owner = c.reshape(p, p, e_loc).sum(axis=2)  # [source, owner] rows
    return int((to_owner[rank].sum() - to_owner[rank, rank] + to_owner[:, rank].sum() - to_owner[rank, rank])
               * row_bytes)


def plot(results: list, path, backward: bool) -> None:
    """One panel per model: TFLOP/s per contender at each rows-per-expert (the slowest rank's median)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = (["backward", "fused m=auto backward", "bwd gemms", "bwd dense"] if backward
             else ["layer", "fused m=auto", "experts", "dense", "layer unheld", "baseline"])
    models = list(dict.fromkeys(r["model"] for r in results))
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        cases = [r for r in results if r["model"] == model]
        width = 0.8 / len(names)
        for j, name in enumerate(names):
            xs = [i + j * width for i, r in enumerate(cases) if "tflops" in r.get(name, {})]
            ys = [r[name]["tflops"] for r in cases if "tflops" in r.get(name, {})]
            if ys:
                ax.bar(xs, ys, width, label=name)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
        ax.set_xticklabels([f"{r['rows_per_expert']}{' skew' if r['skew'] else ''}" for r in cases])
        ax.set_xlabel("rows per expert")
        ax.set_title(model, fontsize=9)
    axes[0][0].set_ylabel("TFLOP/s per GPU")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"MoE {'backward' if backward else 'forward'}, {results[0]['ranks']} rank(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_rank(world, value: float, op: str = "mean") -> float:
    """A rank's number over the world: the mean, min or max."""
    from mpi4py import MPI

    if op == "mean":
        return world.comm.allreduce(value, op=MPI.SUM) / world.size
    return world.comm.allreduce(value, op=MPI.MIN if op == "min" else MPI.MAX)


def case_params(world, cfg, skew, seed):
    """The case's parameters; skew: a linear bias ramp (the last experts take the most rows)."""
    import cupy

    params = MoEParams.random(cfg, world, seed)
    if skew and params.bias is not None:
        params.bias[:] = cupy.asarray(np.linspace(-0.5, 0.5, cfg.experts, dtype=np.float32))
    return params


def fused_layers(world, cfg, tokens, cap, movers, crews, drops=(None,), tree_b=None) -> dict:
    """Path "fused" contenders, one per (movers, crew, capacity factor), by name ('auto': the
    defaults; a drop factor d builds the layer with capacity_factor d: token dropping); with
    tree_b each once more, named "<name> B", built with the kernels of that hipsrc tree
    (kosmos.runtime.source.kernel_tree; warm_b gives them their lazily built launches)."""
    def build():
        return {f"fused m={'auto' if m is None else m}" + ("" if c is None else f" c={c}")
                + ("" if d is None else f" drop={d:g}"):
                MoELayer(world, cfg if d is None else dataclasses.replace(cfg, capacity_factor=d), max_tokens=tokens,
                         capacity_rows=cap, path="fused", movers=m, crew=c)
                for m in movers for c in crews for d in drops}

    layers = build()
    if tree_b:
        with kernel_tree(tree_b):
            layers.update({f"{name} B": layer for name, layer in build().items()})
    return layers


def warm_b(fused, tree_b, x, params, dy=None) -> None:
    """The first forward (and, given dy, backward) of each tree-B layer inside its kernel tree, so
    what a layer builds at its first call (the backward's launch) takes that tree's kernels too."""
    if not tree_b:
        return
    with kernel_tree(tree_b):
        for name, fl in fused.items():
            if name.endswith(" B"):
                _y, c = fl.forward(x, params, check=True)
                if dy is not None:
                    fl.backward(dy, c, params)


def bench_case(world, cfg, rows_per, skew, iters, warmup, seed, phases=False, movers=(None,), crews=(None,),
               baseline=True, drops=(None,), tree_b=None):
    import cupy

    tokens = tokens_of(cfg, rows_per, world.size)
    cap = capacity_of(cfg, tokens, world.size)
    layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="device")
    fused = fused_layers(world, cfg, tokens, cap, movers, crews, drops, tree_b)
    base = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="baseline") if baseline else None
    try:
        params = case_params(world, cfg, skew, seed)
        x = random_bf16((tokens, cfg.hidden), seed + 3 + 7919 * world.rank)
        warm_b(fused, tree_b, x, params)
        y, ctx = layer.forward(x, params, check=True)
        counts = cupy.asnumpy(ctx.group_rows)
        total = int(counts.sum())
        x_e, rows = ctx.x_experts, ctx.group_rows
        h, i = cfg.hidden, cfg.intermediate
        dx = random_bf16((total, h), seed + 4)
        dw1, dw2 = random_bf16((2 * i, h), seed + 5), random_bf16((h, i), seed + 6)
        dh = cupy.empty((total, 2 * i), dx.dtype)
        da = random_bf16((total, i), seed + 7)
        dy = cupy.empty((total, h), dx.dtype)
        gate_up = cupy.empty((x_e.shape[0], 2 * i), dx.dtype)  # kept for the backward, as the layer does

        def whole(_):
            layer.forward(x, params)

        def routed(_):
            a = grouped_matmul(x_e, params.w1, rows, "TN", epilogue="swiglu", gate_up=gate_up)
            return grouped_matmul(a, params.w2, rows, "TN")

        def experts(_):  # every expert GEMM of the layer: the routed ones and the shared expert's
            routed(_)
            layer._shared(x, params)

        s_w = cfg.shared_width
        sx, sw1, sw2 = random_bf16((tokens, h), seed + 8), random_bf16((2 * s_w, h), seed + 9), random_bf16((h, s_w), seed + 10)
        sh, sa, so = cupy.empty((tokens, 2 * s_w), dx.dtype), random_bf16((tokens, s_w), seed + 11), cupy.empty((tokens, h), dx.dtype)

        def dense(_):  # cuBLAS on the same FLOPs: the routed rows' two GEMMs, and the shared MLP's
            cupy.matmul(dx, dw1.T, out=dh)
            cupy.matmul(da, dw2.T, out=dy)
            if s_w:
                cupy.matmul(sx, sw1.T, out=sh)
                cupy.matmul(sa, sw2.T, out=so)

        fns = {"layer": whole}
        dropped = {}
        for name, fl in fused.items():
            _, fctx = fl.forward(x, params, check=True)
            if fctx.routing.kept is not None:
                dropped[name] = int(per_rank(world, int(fctx.routing.dropped), "max"))
            fns[name] = (lambda fl: lambda _: fl.forward(x, params))(fl)
        # a layer forward is ~20 launches: 4 rounds per hold stay well inside the launch queue
        t = time_calls(world, {**fns, "experts": experts, "dense": dense}, warmup, iters, rounds_per_hold=4)
        if base is not None:  # it synchronizes (counts through the host): timed without the blocker,
            # beside the device path timed the same way
            base.forward(x, params)
            for name, tm in time_calls(world, {"layer unheld": whole, "baseline": lambda _: base.forward(x, params)},
                                       warmup, iters, hold=False).items():
                t[name] = tm
        if phases and world.size == 1:  # the dispatch and the combine are called apart from each other
            logits, r = layer._route(x, params)
            y_e, sh = routed(0), layer._shared(x, params)[0]
            t.update(time_calls(world, {
                "router": lambda _: layer._route(x, params), "dispatch": lambda _: layer._dispatch(x, r),
                "routed": routed, "shared": lambda _: layer._shared(x, params),
                "combine": lambda _: layer._combine(y_e, layer._dispatch, r, shared=sh)}, warmup, iters,
                rounds_per_hold=4))
        # what the first fused contender's forward moves over this rank's links, measured (None on
        # one GPU or without NVLink counters), beside the computed pushes
        first = next((fl for name, fl in fused.items() if not name.endswith(" B")), None)
        moved = measure_link_bytes(world, lambda _: first.forward(x, params)) if first is not None else None
        pushed = bytes_out(cupy.asnumpy(layer._dispatch.all_counts), world.rank, layer.e_loc, 2 * h)
        # the routed rows' FLOPs and the shared MLP's on every token
        flops = per_rank(world, 2 * total * (2 * i * h + h * i) + 2 * tokens * 3 * h * s_w)
        rec = {"model": cfg.name, "E": cfg.experts, "top_k": cfg.top_k, "H": h, "I": i, "tokens": tokens,
               "tree_b": str(tree_b) if tree_b else None,
               "ranks": world.size, "rows_per_expert": rows_per, "skew": skew, "total_rows": total,
               "layer_bytes": layer.memory(), "max_rows": int(per_rank(world, int(counts.max()), "max")),
               "bytes_out_max": int(per_rank(world, pushed, "max")), "bytes_out_mean": per_rank(world, pushed),
               "link_bytes_measured": moved,
               "min_rows": int(per_rank(world, int(counts.min()), "min"))}
        for name, tm in t.items():
            rec[name] = {"ms": tm.median_ms, "min_ms": tm.min_ms, "host_us": tm.host_us}
            if name in dropped:  # the most pairs a rank dropped (its FLOPs below count the dropless rows)
                rec[name]["dropped_max"] = dropped[name]
            if name in ("layer", "experts", "dense", "layer unheld", "baseline") or name.startswith("fused"):
                rec[name]["tflops"] = flops / tm.median_ms / 1e9
        rec["layer_vs_experts"] = rec["experts"]["ms"] / rec["layer"]["ms"]
        rec["experts_vs_dense"] = rec["dense"]["ms"] / rec["experts"]["ms"]
        return rec
    finally:
        for lay in (layer, *fused.values(), *([base] if base else [])):
            lay.close()
        cupy.get_default_memory_pool().free_all_blocks()


def bench_backward(world, cfg, rows_per, skew, iters, warmup, seed, movers=(None,), crews=(None,), tree_b=None):
    """The backward of paths "device" and "fused" (MoEBackward: router to fold in one launch):
    step (forward + backward; a backward needs its own forward's context) and forward, so backward
    = step - forward; bwd gemms (the backward's expert GEMMs
    alone: grouped NT for wgrad2, NN with the SwiGLU backward epilogue for dgrad2, NT/NN for
    wgrad1/dgrad1, and the shared experts' (cuBLAS); nothing recomputed: the forward keeps GEMM1's
    pre-activations); bwd dense (cuBLAS on the same FLOPs). Without the stream blocker (host gaps
    included; the host paths synchronize): the device path's step and forward unheld, and the
    serial path's (counts over MPI, kosmos AllToAll, our grouped GEMMs) and the baseline's (NCCL,
    cupy.matmul per expert; one rank per GPU)."""
    import cupy

    from kosmos.reference import NcclBaseline

    tokens = tokens_of(cfg, rows_per, world.size)
    cap = capacity_of(cfg, tokens, world.size)
    layer = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="device")
    fused = fused_layers(world, cfg, tokens, cap, movers, crews, tree_b=tree_b)
    serial = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="serial")
    base = MoELayer(world, cfg, max_tokens=tokens, capacity_rows=cap, path="baseline") if NcclBaseline.available(world) else None
    try:
        params = case_params(world, cfg, skew, seed)
        s = 7919 * world.rank
        x, dy = random_bf16((tokens, cfg.hidden), seed + 3 + s), random_bf16((tokens, cfg.hidden), seed + 4 + s)
        warm_b(fused, tree_b, x, params, dy)
        y, ctx = layer.forward(x, params, check=True)
        layer.backward(dy, ctx, params)
        rows = ctx.group_rows
        total = int(rows.sum())
        h, i, s_w = cfg.hidden, cfg.intermediate, cfg.shared_width
        x_e, a = ctx.x_experts, ctx.h
        d_ye, d_pre = random_bf16(x_e.shape, seed + 5), random_bf16((x_e.shape[0], 2 * i), seed + 6)
        if s_w:  # the shared MLP's backward operands (its own forward's are not kept)
            sx, sd = random_bf16((tokens, h), seed + 7), random_bf16((tokens, 2 * s_w), seed + 8)
            sa, sw1 = random_bf16((tokens, s_w), seed + 9), random_bf16((2 * s_w, h), seed + 10)

        def step_of(lay):  # a forward and the backward of its context
            def call(_):
                _y, c = lay.forward(x, params)
                lay.backward(dy, c, params)
            return call

        step = step_of(layer)

        def gemms(_):
            grouped_matmul(d_ye, a, rows, "NT", out_dtype=np.float32)
            grouped_matmul(d_ye, params.w2, rows, "NN", epilogue="swiglu_backward", gate_up=ctx.gate_up)
            grouped_matmul(d_pre, x_e, rows, "NT", out_dtype=np.float32)
            grouped_matmul(d_pre, params.w1, rows, "NN")
            shared_gemms()

        dyr, ar, xr = random_bf16((total, h), seed + 11), random_bf16((total, i), seed + 12), random_bf16((total, h), seed + 13)
        dpr = random_bf16((total, 2 * i), seed + 14)
        w1, w2 = params.w1[0], params.w2[0]

        def dense(_):  # cuBLAS, the same GEMM shapes over all the routed rows as one group
            cupy.matmul(dyr.T, ar)      # wgrad2 [H, I]
            cupy.matmul(dyr, w2)        # dgrad2 [R, I]
            cupy.matmul(dpr.T, xr)      # wgrad1 [2I, H]
            cupy.matmul(dpr, w1)        # dgrad1 [R, H]
            shared_gemms()

        def shared_gemms():  # wgrad2, dgrad2, wgrad1, dgrad1 of the shared MLP
            if s_w:
                cupy.matmul(dy.T, sa)
                cupy.matmul(dy, params.shared_w2)
                cupy.matmul(sd.T, sx)
                cupy.matmul(sd, sw1)

        contenders = {"step": step, "forward": lambda _: layer.forward(x, params), "bwd gemms": gemms, "bwd dense": dense}
        for name, fl in fused.items():
            contenders[f"{name} step"] = step_of(fl)
            contenders[f"{name} forward"] = lambda _, fl=fl: fl.forward(x, params)
        t = time_calls(world, contenders, warmup, iters, rounds_per_hold=2)

        unheld = {"step unheld": step, "forward unheld": lambda _: layer.forward(x, params),
                  "serial step": step_of(serial), "serial forward": lambda _: serial.forward(x, params)}
        if base is not None:
            unheld.update({"baseline step": step_of(base), "baseline forward": lambda _: base.forward(x, params)})
        t.update(time_calls(world, unheld, warmup, iters, hold=False))
        flops = per_rank(world, 12 * h * (total * i + tokens * s_w))  # 2 + 2 + 4 + 4 (x R H I) per expert
        rec = {"model": cfg.name, "E": cfg.experts, "top_k": cfg.top_k, "H": h, "I": i, "tokens": tokens,
               "tree_b": str(tree_b) if tree_b else None,
               "ranks": world.size, "rows_per_expert": rows_per, "skew": skew, "total_rows": total}
        for name, tm in t.items():
            rec[name] = {"ms": tm.median_ms, "min_ms": tm.min_ms, "host_us": tm.host_us}
        bwd = rec["step"]["ms"] - rec["forward"]["ms"]
        rec["backward"] = {"ms": bwd, "tflops": flops / bwd / 1e9}
        for name in fused:  # e.g. "fused m=auto backward", and its speed-up over path "device"'s backward
            fbwd = rec[f"{name} step"]["ms"] - rec[f"{name} forward"]["ms"]
            rec[f"{name} backward"] = {"ms": fbwd, "tflops": flops / fbwd / 1e9, "vs_device": bwd / fbwd}
        for name in ("bwd gemms", "bwd dense"):
            rec[name]["tflops"] = flops / rec[name]["ms"] / 1e9
        rec["backward_vs_gemms"] = rec["bwd gemms"]["ms"] / bwd
        rec["gemms_vs_dense"] = rec["bwd dense"]["ms"] / rec["bwd gemms"]["ms"]
        # backward = step - forward, unheld (host gaps included)
        rec["device backward unheld"] = {"ms": rec["step unheld"]["ms"] - rec["forward unheld"]["ms"]}
        for who in ("serial", "baseline"):
            if f"{who} step" in rec:
                rec[f"{who} backward unheld"] = {"ms": rec[f"{who} step"]["ms"] - rec[f"{who} forward"]["ms"]}
        return rec
    finally:
        for lay in (layer, *fused.values(), serial, *([base] if base else [])):
            lay.close()
        cupy.get_default_memory_pool().free_all_blocks()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rows per expert 256 and 2048, no skew")
    ap.add_argument("--rows", default="256,512,2048")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--skew", action="store_true", help="also a skewed routing (models with expert_bias)")
    ap.add_argument("--movers", default="auto",
                    help="path 'fused' layers to time, by movers (comma-separated CTA counts, 'auto' = default)")
    ap.add_argument("--crew", default="auto",
                    help="and by combine crew (comma-separated CTA counts, 'auto' = default): every pair is timed")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward instead (step = forward + backward, its GEMMs alone, dense)")
    ap.add_argument("--drop", default="",
                    help="forward: also path 'fused' with token dropping at these capacity factors (comma-separated)")
    ap.add_argument("--tree-b", default="",
                    help="also each path 'fused' layer with the kernels of this hipsrc tree, named '<name> B', "
                         "timed interleaved with this tree's (an A/B of a kernel change; the Python side is this "
                         "tree's, so the other must agree on records and launch shapes)")
    ap.add_argument("--phases", action="store_true",
                    help="also time the layer's parts alone: router, dispatch, routed, shared, combine")
    add_timing_args(ap)
    args = ap.parse_args(argv)
    rows_list = [256, 2048] if args.quick else [int(r) for r in args.rows.split(",")]
    movers = tuple(None if m == "auto" else int(m) for m in args.movers.split(","))
    crews = tuple(None if c == "auto" else int(c) for c in args.crew.split(","))
    drops = (None, *(float(d) for d in args.drop.split(",") if d))
    with gpu_per_rank("bench/moe.py") as (world, commit):
        say = print if world.rank == 0 else (lambda *a, **k: None)  # rank 0 speaks for the slowest rank
        results = []
        for name in args.models.split(","):
            cfg = share(name, world.size)
            for rows_per in rows_list:
                for skew in (False, True) if args.skew and not args.quick else (False,):
                    if args.backward:
                        rec = bench_backward(world, cfg, rows_per, skew, args.iters, args.warmup, len(results) * 7 + 1,
                                             movers=movers, crews=crews, tree_b=args.tree_b)
                        results.append(rec)
                        say(f"{cfg.name:22s} rows/exp {rows_per:5d} {'skewed' if skew else 'routed':6s} "
                              f"backward {rec['backward']['ms']:7.3f} ms (step {rec['step']['ms']:.3f} - forward "
                              f"{rec['forward']['ms']:.3f})  gemms {rec['bwd gemms']['ms']:7.3f}  dense "
                              f"{rec['bwd dense']['ms']:7.3f}  backward/gemms {rec['backward_vs_gemms']:.3f}  "
                              f"gemms/dense {rec['gemms_vs_dense']:.3f}", flush=True)
                        say("    fused backward: " + "  ".join(f"{k[6:-9]} {v['ms']:.3f} ({v['vs_device']:.3f}x)"
                                                           for k, v in rec.items() if k.endswith(" backward")
                                                           and k.startswith("fused")), flush=True)
                        say("    unheld backward: " + "  ".join(f"{k.split()[0]} {v['ms']:.3f}" for k, v in rec.items()
                                                            if k.endswith("backward unheld")), flush=True)
                        continue
                    rec = bench_case(world, cfg, rows_per, skew, args.iters, args.warmup, seed=len(results) * 7 + 1,
                                     phases=args.phases, movers=movers, crews=crews, drops=drops, tree_b=args.tree_b)
                    results.append(rec)
                    say(f"{cfg.name:22s} rows/exp {rows_per:5d} {'skewed' if skew else 'routed':6s} "
                          f"layer {rec['layer']['ms']:7.3f} ms  experts {rec['experts']['ms']:7.3f}  "
                          f"dense {rec['dense']['ms']:7.3f}  layer/experts {rec['layer_vs_experts']:.3f}  "
                          f"experts/dense {rec['experts_vs_dense']:.3f}", flush=True)
                    say("    " + "  ".join(f"{k} {v['ms']:.3f}" for k, v in rec.items()
                                             if k.startswith("fused") or k in ("layer unheld", "baseline")),
                          flush=True)
                    if args.phases and world.size == 1:
                        say("    " + "  ".join(f"{p} {rec[p]['ms']:.3f}" for p in PHASES), flush=True)
        if world.rank:
            return
        stem = write_results(args, "moe_backward" if args.backward else "moe", commit, results, world.size,
                             path="device")
        say(f"\n# summary ({device_name()}, commit {commit}) -> {stem}.json")
        for r in results if not args.backward else []:
            say(f"{r['model']:22s} {r['rows_per_expert']:5d} layer/experts {r['layer_vs_experts']:.3f} "
                  f"experts/dense {r['experts_vs_dense']:.3f}")
        plot(results, stem.with_suffix(".png"), args.backward)


if __name__ == "__main__":
    main()
