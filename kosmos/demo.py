"""The main job: run kosmos's collectives, a TP+SP fused op and an MoE layer, check them, and
race them against NCCL (+ cuBLAS).

    launch/kosmosrun -np 2 -- python3 -m kosmos.demo
    python3 -m kosmos.demo            # world size 1

Every rank checks its results against a float64 reference (the collectives also bitwise against
their exact result, the fused AG+TN bitwise against our plain GEMM on the gathered operand); rank 0
prints a table of times, bandwidths and TFLOP/s. When ranks share a GPU the table says so and leaves
timings out: time-sliced contexts make them meaningless.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from . import World
from .collectives import AllGather, AllToAll, ReduceScatter
from .dtypes import bfloat16
from .reference import NcclBaseline, reduce_scatter_exact, rel_error
from .timing import device_name, git_commit, time_call, time_calls


def rank_input(seed: int, rank: int, shape: tuple[int, ...]) -> np.ndarray:
    return (np.random.default_rng([seed, rank]).standard_normal(shape) + 0.1).astype(bfloat16)


def check_ag_tn(world, cupy, m: int, n: int, k: int):
    """AllGatherMatmul (AG+TN) on fresh inputs: (ok, op, x, w). ok: relative error against float64
    below 1e-2 (one bf16 rounding of fp32 sums) and bitwise our plain GEMM on the gathered X."""
    from . import gemm
    from .tp.ops import AllGatherMatmul

    P, r = world.size, world.rank
    xs = [rank_input(6, p, (m, k)) for p in range(P)]
    w_h = rank_input(7, 0, (n, k)) * np.asarray(0.03, bfloat16)
    x, w = cupy.asarray(xs[r]), cupy.asarray(w_h)
    op = AllGatherMatmul(world, m, n, k)
    out = cupy.full((P * m, n), 0x7FC0, np.uint16).view(bfloat16)  # poisoned with NaN
    y = cupy.asnumpy(op(x, w, out)).astype(np.float64)
    x_all = np.concatenate(xs)
    ref = x_all.astype(np.float64) @ w_h.astype(np.float64).T
    err = rel_error(y, ref)
    plain = cupy.asnumpy(gemm.matmul(cupy.asarray(x_all), w, "TN")).view(np.uint16)
    return bool(err < 1e-2 and np.array_equal(plain, cupy.asnumpy(out).view(np.uint16))), op, x, w


def check_moe(world, cupy, tokens: int):
    """An MoE layer forward (device path: route, dispatch, grouped GEMMs, combine) on fresh tokens:
    (ok, layer, x, params). ok: relative error below 3e-2 against the float64 layer over the tokens
    routed as the reference routes them (at most 1 % may differ: fp32 logits within rounding)."""
    from .moe import MoEConfig, MoELayer, MoEParams, expert_tensors
    from .moe import reference as moe_ref

    P, r = world.size, world.rank
    cfg = MoEConfig(experts=8 * P, top_k=2, hidden=1024, intermediate=512, name="demo")
    layer = MoELayer(world, cfg, max_tokens=tokens)
    params = MoEParams.random(cfg, world, seed=3)
    xs = [rank_input(8, p, (tokens, cfg.hidden)) for p in range(P)]
    x = cupy.asarray(xs[r])
    y, ctx = layer.forward(x, params, check=True)
    f64 = lambda a: cupy.asnumpy(a).astype(np.float64)  # noqa: E731
    w1 = np.stack([f64(expert_tensors(cfg, g, 3)[0]) for g in range(cfg.experts)])
    w2 = np.stack([f64(expert_tensors(cfg, g, 3)[1]) for g in range(cfg.experts)])
    ref, routing = moe_ref.forward(np.concatenate(xs).astype(np.float64), f64(params.router_w), w1, w2, cfg)
    mine = slice(r * tokens, (r + 1) * tokens)
    same = (cupy.asnumpy(ctx.routing.experts) == routing.experts[mine]).all(axis=1)
    got, want = f64(y)[same], ref[mine][same]
    err = rel_error(got, want)
    return bool((~same).sum() <= tokens // 100 and err < 3e-2), layer, x, params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=64.0, help="bytes per rank of each collective's input, MiB")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args(argv)
    from .environment import import_cupy, probe_gpus

    probe = probe_gpus()
    if probe.problem or probe.count == 0:
        print(f"kosmos demo: {probe.problem or 'no GPU here: ' + probe.reason}. The demo runs kosmos's "
              "kernels and needs a GPU; `python3 -m kosmos info` reports what this machine has.", file=sys.stderr)
        return 2
    cupy = import_cupy()
    with World() as world:
        P, r = world.size, world.rank
        say = print if r == 0 else (lambda *a, **k: None)
        say(f"kosmos demo: {P} rank(s), GPU {device_name()}, commit {git_commit()}"
            + (" [ranks share a GPU: correctness only]" if world.oversubscribed else ""), flush=True)
        cols = 4096  # bf16 row of 8 KiB
        rows = max(P, int(args.mib * 2**20 / (cols * 2)) // P * P)
        no_nccl = NcclBaseline.unavailable_reason(world)
        nccl = None if no_nccl else NcclBaseline(world)
        if no_nccl and not world.oversubscribed:
            say(f"NCCL rows left out: {no_nccl}", flush=True)

        # Checks (small shapes: every rank rebuilds every rank's input on the host).
        small = (P * 40, 264)
        xs = [rank_input(1, p, small) for p in range(P)]
        x = cupy.asarray(xs[r])
        ok_ag = np.array_equal(cupy.asnumpy(AllGather(world, small, bfloat16)(x)).view(np.uint16),
                               np.concatenate(xs).view(np.uint16))
        ok_rs = np.array_equal(cupy.asnumpy(ReduceScatter(world, small, bfloat16)(x)).view(np.uint16),
                               reduce_scatter_exact(xs, r).view(np.uint16))
        counts = np.random.default_rng(5).integers(1, 30, (P, P))
        zs = [rank_input(2, p, (int(counts[p].sum()), 264)) for p in range(P)]
        got, _ = AllToAll(world, 2048, (264,), bfloat16)(cupy.asarray(zs[r]), counts[r])
        want = np.concatenate([zs[s][int(counts[s, :r].sum()):][:int(counts[s, r])] for s in range(P)])
        ok_a2a = np.array_equal(cupy.asnumpy(got).view(np.uint16), want.view(np.uint16))
        tp_m, tp_n, tp_k = 1024, 4096, 4096
        ok_tp, ag_tn, xt, wt = check_ag_tn(world, cupy, tp_m, tp_n, tp_k)
        moe_tokens = 2048
        ok_moe, moe, xm, pm = check_moe(world, cupy, moe_tokens)
        world.synchronize()
        oks = world.comm.allgather((ok_ag, ok_rs, ok_a2a, ok_tp, ok_moe))
        all_ok = all(all(o) for o in oks)
        names = ("all_gather", "reduce_scatter", "all_to_all", "AG+TN fused", "MoE layer")
        say("checks vs float64 reference on every rank: " +
            ", ".join(f"{nm} {all(o[i] for o in oks)}" for i, nm in enumerate(names)), flush=True)

        if world.oversubscribed:
            say("timings skipped: ranks time-slice one GPU. Run one rank per GPU to time.")
            moe.close()
            ag_tn.close()
            return 0 if all_ok else 1

        # Timings: bus bytes per rank and call = what crosses this rank's links (NCCL's busBw convention).
        table = []
        shard = (rows // P, cols)
        xa = cupy.asarray(rank_input(3, r, shard))
        ag = AllGather(world, shard, bfloat16)
        out = cupy.empty((rows, cols), bfloat16)
        moved = shard[0] * cols * 2 * (P - 1)
        table.append(("all_gather", "kosmos", time_call(world, lambda i: ag(xa, out), iters=args.iters), moved))
        if nccl:
            table.append(("all_gather", "NCCL", time_call(world, lambda i: nccl.all_gather(xa, out), iters=args.iters), moved))
        xr = cupy.asarray(rank_input(4, r, (rows, cols)))
        rs = ReduceScatter(world, (rows, cols), bfloat16)
        outr = cupy.empty(shard, bfloat16)
        table.append(("reduce_scatter", "kosmos", time_call(world, lambda i: rs(xr, outr), iters=args.iters), moved))
        if nccl:
            table.append(("reduce_scatter", "NCCL", time_call(world, lambda i: nccl.reduce_scatter(xr, outr), iters=args.iters), moved))
        per = shard[0] // P
        even = np.full(P, per, np.int64)
        xe = cupy.asarray(rank_input(5, r, (per * P, cols)))
        a2a = AllToAll(world, per * P, (cols,), bfloat16)
        moved_a2a = per * cols * 2 * (P - 1)
        table.append(("all_to_all", "kosmos", time_call(world, lambda i: a2a(xe, even), iters=args.iters), moved_a2a))
        if nccl:
            oute = cupy.empty((per * P, cols), bfloat16)
            table.append(("all_to_all", "NCCL", time_call(world, lambda i: nccl.all_to_all(xe, even, oute, even), iters=args.iters), moved_a2a))
        # The fused AG+TN against the gather and the GEMM one after the other (NCCL + cuBLAS where
        # NCCL runs, else ours), interleaved call by call.
        from . import gemm

        flops = 2.0 * P * tp_m * tp_n * tp_k
        gathered = cupy.empty((P * tp_m, tp_k), bfloat16)
        y_tp = cupy.empty((P * tp_m, tp_n), bfloat16)
        if nccl:
            apart = ("NCCL+cuBLAS", lambda i: cupy.matmul(nccl.all_gather(xt, gathered), wt.T, out=y_tp))
        else:
            ag_x = AllGather(world, (tp_m, tp_k), bfloat16)
            apart = ("ours apart", lambda i: gemm.matmul(ag_x(xt, gathered), wt, "TN", out=y_tp))
        t = time_calls(world, {"fused": lambda i: ag_tn(xt, wt, y_tp), "apart": apart[1]}, iters=args.iters)
        table.append(("AG+TN", "kosmos", t["fused"], -flops))
        table.append(("AG+TN", apart[0], t["apart"], -flops))
        moe_flops = 2.0 * 3 * moe_tokens * moe.cfg.top_k * moe.cfg.hidden * moe.cfg.intermediate
        # a forward is ~15 launches: release the blocker every 4 rounds (the launch queue stays short)
        t_moe = time_calls(world, {"moe": lambda i: moe.forward(xm, pm)}, iters=args.iters, rounds_per_hold=4)
        table.append(("MoE forward", "kosmos", t_moe["moe"], -moe_flops))
        for plan in (moe, ag_tn, *([] if nccl else [ag_x])):
            plan.close()
        say(f"\n{'op':16s}{'impl':12s}{'median ms':>11s}{'GB/s':>9s}{'TFLOP/s':>9s}   "
            f"(bus bytes per rank; slowest rank's median of {args.iters})")
        for op, impl, t, b in table:  # b: bus bytes, or minus the FLOPs per rank of a compute op
            rate = abs(b) / (t.median_ms * 1e-3)
            gbs = f"{rate / 1e9:9.1f}" if b > 0 else f"{'':9s}"
            tfs = f"{rate / 1e12:9.1f}" if b < 0 else ""
            say(f"{op:16s}{impl:12s}{t.median_ms:11.3f}{gbs}{tfs}")
        if P == 1:
            say("world size 1: nothing crosses a link (GB/s n/a); each collective is the identity, a memcpy; "
                "AG+TN is a plain GEMM and the MoE layer one rank's experts.")
        if nccl:
            nccl.close()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
