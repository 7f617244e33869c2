"""Mover bandwidth: bytes per SM per second of kosmos's copy loops, and the collectives vs NCCL.

    python3 bench/collectives.py                       # world size 1: mover loop vs cupy copy
    mpirun -np 8 python3 bench/collectives.py          # plus all-gather / reduce-scatter / all-to-all vs NCCL

Part 1 (every world size, rank 0's GPU): the mover loop copies between local buffers on a
persistent grid of 1..all SMs (same loop as the collectives' movers), against CuPy's
device-to-device copy on the whole GPU. Bytes counted = read + written.
Part 2 (world size > 1, one rank per GPU): per-rank bus GB/s of each collective, kosmos vs NCCL,
at several sizes and mover crews. Writes JSON and a PNG under bench/results/.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kosmos import World  # noqa: E402
from kosmos.collectives import MOVER_THREADS, AllGather, AllToAll, ReduceScatter  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.reference import NcclBaseline  # noqa: E402
from kosmos.runtime import PersistentLaunch, load_module, sm_count  # noqa: E402
from kosmos.timing import check_timeable, device_name, git_commit, time_call  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def mover_loop(world: World, nbytes: int, sms: list[int], threads: int, item_bytes: int, iters: int) -> list[dict]:
    import cupy

    mod = load_module("collectives.hip", world=world)
    fn = mod.get_function("kosmos_mover_copy")
    nbuf = 4  # rotate buffers so the 60 MiB L2 does not serve the copy
    src = [cupy.random.random(nbytes // 4, dtype=np.float32) + 1 for _ in range(nbuf)]
    dst = [cupy.empty_like(s) for s in src]
    rows = []
    t = time_call(world, lambda i: cupy.copyto(dst[i % nbuf], src[i % nbuf]), iters=iters)
    base_gbs = 2 * nbytes / (t.median_ms * 1e-3) / 1e9
    rows.append({"impl": "cupy copy", "sms": sm_count(), "threads": None, "median_ms": t.median_ms,
                 "GBps": base_gbs, "GBps_per_sm": base_gbs / sm_count()})
    for n in sms:
        launch = PersistentLaunch.checked(fn, n, threads)
        head = cupy.zeros(1, np.uint64)
        epoch = [0]

        def run(i):
            epoch[0] += 1
            launch((head, dst[i % nbuf], src[i % nbuf], np.uint64(nbytes), np.uint64(item_bytes), np.uint64(epoch[0])))

        t = time_call(world, run, iters=iters)
        ok = bool((dst[(5 + iters - 1) % nbuf] == src[(5 + iters - 1) % nbuf]).all())
        gbs = 2 * nbytes / (t.median_ms * 1e-3) / 1e9
        rows.append({"impl": "kosmos mover", "sms": n, "threads": threads, "median_ms": t.median_ms, "GBps": gbs,
                     "GBps_per_sm": gbs / n, "correct": ok})
    return rows


def collectives(world: World, sizes_mib: list[float], crews: list[int], iters: int) -> list[dict]:
    import cupy

    P, r = world.size, world.rank
    nccl = NcclBaseline(world) if NcclBaseline.available(world) else None
    cols, rows_out = 4096, []
    for mib in sizes_mib:
        shard_rows = max(1, int(mib * 2**20 / (cols * 2)))
        shard = (shard_rows, cols)
        x = cupy.random.standard_normal(shard, dtype=np.float32).astype(bfloat16)
        full = cupy.random.standard_normal((shard_rows * P, cols), dtype=np.float32).astype(bfloat16)
        out_ag = cupy.empty((shard_rows * P, cols), bfloat16)
        out_rs = cupy.empty(shard, bfloat16)
        per = max(1, shard_rows // P)
        even = np.full(P, per, np.int64)
        xa = x[: per * P]
        bus = shard_rows * cols * 2 * (P - 1)  # bytes that leave (and enter) each rank
        bus_a2a = per * cols * 2 * (P - 1)
        cases = []
        for crew in crews:
            ag, rs = AllGather(world, shard, bfloat16, crew=crew), ReduceScatter(world, full.shape, bfloat16, crew=crew)
            a2a = AllToAll(world, per * P, (cols,), bfloat16, crew=crew)
            cases += [("all_gather", f"kosmos/{crew}", lambda i, ag=ag: ag(x, out_ag), bus),
                      ("reduce_scatter", f"kosmos/{crew}", lambda i, rs=rs: rs(full, out_rs), bus),
                      ("all_to_all", f"kosmos/{crew}", lambda i, a=a2a: a(xa, even), bus_a2a)]
        if nccl:
            out_a2a = cupy.empty((per * P, cols), bfloat16)
            cases += [("all_gather", "NCCL", lambda i: nccl.all_gather(x, out_ag), bus),
                      ("reduce_scatter", "NCCL", lambda i: nccl.reduce_scatter(full, out_rs), bus),
                      ("all_to_all", "NCCL", lambda i: nccl.all_to_all(xa, even, out_a2a, even), bus_a2a)]
        for op, impl, fn, b in cases:
            t = time_call(world, fn, iters=iters)
            rows_out.append({"op": op, "impl": impl, "mib_per_rank": mib, "median_ms": t.median_ms,
                             "bus_GBps": b / (t.median_ms * 1e-3) / 1e9})
            if r == 0:
                print(f"  {op:15s} {impl:12s} {mib:7.1f} MiB  {t.median_ms:8.3f} ms  {rows_out[-1]['bus_GBps']:7.1f} GB/s", flush=True)
    if nccl:
        nccl.close()
    return rows_out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    movers = [r for r in result["mover_loop"] if r["impl"] == "kosmos mover"]
    base = [r for r in result["mover_loop"] if r["impl"] == "cupy copy"][0]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["sms"] for r in movers], [r["GBps"] for r in movers], "o-", label="kosmos mover loop")
    ax.axhline(base["GBps"], color="gray", ls="--", label=f"cupy copy, all {base['sms']} SMs")
    ax.set_xlabel("SMs (persistent CTAs)")
    ax.set_ylabel("GB/s (read + write)")
    ax.set_title(f"{result['gpu']}, commit {result['commit']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=1024.0, help="bytes per mover-loop copy, MiB")
    ap.add_argument("--sms", type=str, default="1,2,4,8,16,32,66,99,132")
    ap.add_argument("--threads", type=int, default=MOVER_THREADS)
    ap.add_argument("--item-kib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sizes", type=str, default="4,32,256", help="collective MiB per rank (world size > 1)")
    ap.add_argument("--crews", type=str, default="8,16,32,64,132", help="mover CTAs per collective (the smallest feeds kosmos.tp.refit)")
    ap.add_argument("--allow-oversubscribed", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    with World() as world:
        check_timeable(world, args.allow_oversubscribed)
        total = sm_count()
        sms = [s for s in (int(v) for v in args.sms.split(",")) if s <= total]
        if world.rank == 0:
            print(f"bench/collectives: {device_name()}, world {world.size}, commit {git_commit()}", flush=True)
        result = {"gpu": device_name(), "world_size": world.size, "oversubscribed": world.oversubscribed,
                  "commit": git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "mover_loop": mover_loop(world, int(args.mib * 2**20), sms, args.threads, args.item_kib * 1024, args.iters)}
        if world.size > 1:
            crews = [min(int(c), total) for c in args.crews.split(",")]
            result["collectives"] = collectives(world, [float(s) for s in args.sizes.split(",")], crews, args.iters)
        if world.rank == 0:
            args.out.mkdir(parents=True, exist_ok=True)
            stem = f"collectives_w{world.size}"
            (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
            plot(result, args.out / f"{stem}.png")
            print(f"\n{'impl':14s}{'SMs':>5s}{'ms':>9s}{'GB/s':>9s}{'GB/s/SM':>9s}")
            for r in result["mover_loop"]:
                print(f"{r['impl']:14s}{r['sms']:5d}{r['median_ms']:9.3f}{r['GBps']:9.1f}{r['GBps_per_sm']:9.2f}"
                      + ("" if r.get("correct", True) else "  WRONG"))
            print(f"wrote {args.out / stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
