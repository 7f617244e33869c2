"""The main job: run kosmos's collectives, check them, and race them against NCCL.

    launch/kosmosrun -np 2 -- python3 -m kosmos.demo
    python3 -m kosmos.demo            # world size 1

Every rank checks its results against a float64 reference (and against NCCL where each rank
has its own GPU); rank 0 prints a table of times and bandwidths. When ranks share a GPU the
table says so and leaves timings out: time-sliced contexts make them meaningless.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from . import World
from .collectives import AllGather, AllToAll, ReduceScatter
from .dtypes import bfloat16
from .reference import NcclBaseline, reduce_scatter_exact
from .timing import device_name, git_commit, time_call


def rank_input(seed: int, rank: int, shape: tuple[int, ...]) -> np.ndarray:
    return (np.random.default_rng([seed, rank]).standard_normal(shape) + 0.1).astype(bfloat16)


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
        world.synchronize()
        oks = world.comm.allgather((ok_ag, ok_rs, ok_a2a))
        all_ok = all(all(o) for o in oks)
        say(f"checks vs float64 reference on every rank: all_gather {all(o[0] for o in oks)}, "
            f"reduce_scatter {all(o[1] for o in oks)}, all_to_all {all(o[2] for o in oks)}", flush=True)

        if world.oversubscribed:
            say("timings skipped: ranks time-slice one GPU. Run one rank per GPU to time.")
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
        say(f"\n{'op':16s}{'impl':8s}{'median ms':>11s}{'GB/s':>9s}   (bus bytes per rank; slowest rank's median of {args.iters})")
        for op, impl, t, b in table:
            gbs = b / (t.median_ms * 1e-3) / 1e9 if b else float("nan")
            say(f"{op:16s}{impl:8s}{t.median_ms:11.3f}{gbs:9.1f}")
        if P == 1:
            say("world size 1: nothing crosses a link (GB/s n/a); each collective is the identity, a memcpy.")
        if nccl:
            nccl.close()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
