"""Soak: many calls of random legal ops, shapes and switches, each checked against its oracle, with
faults injected; counts wrong results, hangs and errors on every rank, and how long each fault took
to surface. Correctness, not speed: ranks may share one GPU.

    mpirun --allow-run-as-root --oversubscribe -np 4 python3 bench/soak.py --calls 2000 [--minutes M]

Every rank draws the same schedule from one seed (op, shape, switches, fault); inputs are drawn per
rank. Oracles are exact (bitwise): the collectives against NumPy on every rank's inputs, the fused
ops against our collectives and our GEMM on the same operands (themselves checked here). Faults:
  late     one rank starts the call 0.3-1.2 s after the others (the result must still be exact);
  absent   one rank never calls (the others' waits give up after the op's budget);
  bad_arg  one rank passes a wrongly shaped input to a plan (it raises; the others give up).
After absent and bad_arg every rank must raise within the budget plus a margin; then every rank calls
World.clear_failure() and builds new plans. A hang is a step that outlives --hang-s: faulthandler
prints every thread's stack and the process exits nonzero before any result file is written, so a
results file exists only for a run without a hang (its "hangs" is then 0 by construction).
Writes bench/results/soak_w{P}.json (commit, GPU, world size).
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kosmos  # noqa: E402
from kosmos.collectives import AllGather, AllToAll, ReduceScatter  # noqa: E402
from kosmos.dtypes import bfloat16, f32_to_bf16  # noqa: E402
from kosmos.errors import KosmosError, KosmosTimeoutError  # noqa: E402
from kosmos.reference import reduce_scatter_exact  # noqa: E402
from kosmos.timing import device_name, git_commit  # noqa: E402
from kosmos.tp.ops import (AllGatherMatmul, BulkAllGatherMatmul, BulkReduceScatterMatmul,  # noqa: E402
                           MatmulReduceScatter)

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("all_gather", "reduce_scatter", "all_to_all", "matmul", "ag_tn", "ag_nn", "tn_rs", "bulk_ag_nn", "bulk_rs_nt")
FAULTS = ("late", "absent", "bad_arg")


def rank_array(seed: tuple, rank: int, shape: tuple, dtype=bfloat16, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng([*seed, rank])
    return ((rng.standard_normal(shape) + 0.05) * scale).astype(dtype)


def bits(a) -> np.ndarray:
    import cupy

    h = cupy.asnumpy(a)
    return h.view(np.uint16 if h.dtype.itemsize == 2 else np.uint32)


class Soak:
    def __init__(self, world: kosmos.World, seed: int, budget_s: float, fault_rate: float):
        self.world, self.P, self.r = world, world.size, world.rank
        self.fault_rate = fault_rate
        self.rng = np.random.default_rng(seed)  # the schedule: identical on every rank
        self.seed, self.budget_s = seed, budget_s
        self.plans: dict[tuple, object] = {}

    # ---- plans: cached by (kind, shape, switches); a few closed at random to exercise freeing ----
    def plan(self, key: tuple, make):
        op = self.plans.get(key)
        if op is None:
            if len(self.plans) >= 12:
                old = next(iter(self.plans))
                self.plans.pop(old).close()
            op = self.plans[key] = make()
            op.wait_budget_s = self.budget_s
        return op

    def drop_plans(self) -> None:
        for op in self.plans.values():
            try:
                op.close()
            except KosmosError:
                pass
        self.plans.clear()

    # ---- one step ----
    def draw(self) -> dict:
        g = self.rng
        kind = KINDS[int(g.integers(len(KINDS)))]
        m = int(g.choice([128, 256, 384]))
        n, k = (int(g.choice([64, 128, 192, 320])) for _ in range(2))
        step = dict(kind=kind, m=m, n=n, k=k, tag=int(g.integers(1 << 30)))
        if kind in ("ag_tn", "ag_nn"):
            step["policy"] = str(g.choice(["one_way", "two_way", "fixed"]))
            step["ag_order"] = str(g.choice(["local_first", "chunk_major", "naive"]))
            step["mover_threads"] = int(g.choice([128, 256, 384]))
        if kind == "tn_rs":
            step["policy"] = str(g.choice(["one_way", "fixed"]))
            step["staging"] = str(g.choice(["bfloat16", "float32"]))
            step["rs_order"] = str(g.choice(["band_major", "row_major"]))
        if kind in ("reduce_scatter",):
            step["dtype"] = str(g.choice(["bfloat16", "float32"]))
        if kind == "all_to_all":
            skew = bool(g.integers(2))
            c = g.integers(0, 40, (self.P, self.P))
            if skew:
                c[:, int(g.integers(self.P))] += 200  # a hot destination
            step["counts"] = c
        if kind == "matmul":
            step["layout"] = str(g.choice(["TN", "NN", "NT"]))
            step["rows"] = int(g.integers(1, 700))  # any M
        fault = None
        if self.P > 1 and g.random() < self.fault_rate:
            fault = str(g.choice(FAULTS if kind not in ("matmul",) else ("late",)))
            if kind == "all_to_all" and fault != "late":
                fault = "late"  # its call exchanges counts over MPI: a rank that never calls would hang MPI itself
            if fault == "bad_arg" and kind == "reduce_scatter":
                fault = "absent"
        step["fault"], step["who"] = fault, int(g.integers(self.P))
        step["delay"] = float(g.uniform(0.3, 1.2))
        return step

    def run(self, step: dict) -> tuple:
        """(call, check) for this rank: call() launches, check() compares with the oracle (bitwise)."""
        import cupy

        P, r, kind, m, n, k, t = self.P, self.r, step["kind"], step["m"], step["n"], step["k"], step["tag"]
        w = self.world
        dev = lambda name, rank, shape, scale=1.0, dt=bfloat16: cupy.asarray(  # noqa: E731
            rank_array((self.seed, t, hash_name(name)), rank, shape, dt, scale))
        if kind == "all_gather":
            host = [rank_array((self.seed, t, 1), p, (m, n)) for p in range(P)]
            x = cupy.asarray(host[r])
            op = self.plan(("ag", m, n), lambda: AllGather(w, (m, n), bfloat16))
            return (lambda bad=False: op(x[:-1] if bad else x)), lambda out: np.array_equal(
                bits(out), np.concatenate(host).view(np.uint16))
        if kind == "reduce_scatter":
            dt = np.dtype(step["dtype"])
            host = [rank_array((self.seed, t, 2), p, (P * m, n), dt) for p in range(P)]
            op = self.plan(("rs", m, n, dt.name), lambda: ReduceScatter(w, (P * m, n), dt))
            return (lambda bad=False: op(cupy.asarray(host[r]))), lambda out: np.array_equal(
                bits(out), reduce_scatter_exact(host, r).view(bits(out).dtype))
        if kind == "all_to_all":
            c = step["counts"]
            host = [rank_array((self.seed, t, 3), p, (int(c[p].sum()), 64)) for p in range(P)]
            op = self.plan(("a2a",), lambda: AllToAll(w, 2048, (64,), bfloat16))
            want = np.concatenate([host[s][int(c[s, :r].sum()):][:int(c[s, r])] for s in range(P)])
            return (lambda bad=False: op(cupy.asarray(host[r]), c[r])[0]), lambda out: np.array_equal(
                bits(out), want.view(np.uint16))
        if kind == "matmul":
            lay, rows = step["layout"], step["rows"]
            shapes = {"TN": ((rows, k), (n, k)), "NN": ((rows, n), (n, k)), "NT": ((rows, n), (rows, k))}[lay]
            a, b = dev("a", r, shapes[0]), dev("b", r, shapes[1], 0.1)
            ref = cupy.asnumpy(a).astype(np.float64)
            bf = cupy.asnumpy(b).astype(np.float64)
            want = ref @ bf.T if lay == "TN" else ref @ bf if lay == "NN" else ref.T @ bf
            return (lambda bad=False: kosmos.matmul(a, b, lay)), lambda out: rel(out, want) < 1e-2
        if kind in ("ag_tn", "ag_nn"):
            lay = "TN" if kind == "ag_tn" else "NN"
            row = k if lay == "TN" else n
            x, wt = dev("x", r, (m, row)), dev("w", 0, (n, k), 0.1)
            sw = dict(policy=step["policy"], ag_order=step["ag_order"], mover_threads=step["mover_threads"])
            op = self.plan((kind, m, n, k, tuple(sorted(sw.items()))),
                           lambda: AllGatherMatmul(w, m, n, k, layout=lay, **sw))
            want = bits(kosmos.matmul(kosmos.all_gather(w, x), wt, lay, tile_n=256))  # the fused tile
            return (lambda bad=False: op(x[:-1] if bad else x, wt)), lambda out: np.array_equal(bits(out), want)
        if kind == "tn_rs":
            x, wt = dev("x", r, (P * m, k)), dev("w", r, (n, k), 0.1)
            sd = np.dtype(step["staging"])
            sw = dict(policy=step["policy"], staging_dtype=sd, rs_order=step["rs_order"])
            op = self.plan((kind, m, n, k, step["policy"], sd.name, step["rs_order"]),
                           lambda: MatmulReduceScatter(w, m, n, k, **sw))
            part = kosmos.matmul(x, wt, "TN", out_dtype=sd, tile_n=256)
            red = kosmos.reduce_scatter(w, part)
            want = bits(red if sd == bfloat16 else f32_to_bf16(red))
            return (lambda bad=False: op(x[:-1] if bad else x, wt)), lambda out: np.array_equal(bits(out), want)
        if kind == "bulk_ag_nn":
            x, dy, wt = dev("x", r, (m, k)), dev("dy", r, (P * m, n)), dev("w", 0, (n, k), 0.1)
            op = self.plan((kind, m, n, k), lambda: BulkAllGatherMatmul(w, m, n, k))
            want = (bits(kosmos.all_gather(w, x)), bits(kosmos.matmul(dy, wt, "NN", tile_n=256)))
            return (lambda bad=False: op(x[:-1] if bad else x, dy, wt)), lambda out: (
                np.array_equal(bits(out[0]), want[0]) and np.array_equal(bits(out[1]), want[1]))
        # bulk_rs_nt
        dxp, dy, xf = dev("dxp", r, (P * m, k)), dev("dy", r, (P * m, n)), dev("xf", r, (P * m, k))
        op = self.plan((kind, m, n, k), lambda: BulkReduceScatterMatmul(w, m, n, k))
        want = (bits(kosmos.reduce_scatter(w, dxp)), bits(kosmos.matmul(dy, xf, "NT", tile_n=256)))
        return (lambda bad=False: op(dxp[:-1] if bad else dxp, dy, xf)), lambda out: (
            np.array_equal(bits(out[0]), want[0]) and np.array_equal(bits(out[1]), want[1]))


def hash_name(name: str) -> int:
    return sum((i + 1) * ord(ch) for i, ch in enumerate(name))  # stable across processes (not hash())


def rel(out, ref) -> float:
    import cupy

    o = cupy.asnumpy(out).astype(np.float64)
    return float(np.linalg.norm(o - ref) / max(np.linalg.norm(ref), 1e-300)) if np.isfinite(o).all() else np.inf


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="checked calls to make (the schedule's steps)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (all ranks agree)")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--faults", type=float, default=0.05, help="probability that a step injects a fault")
    ap.add_argument("--budget-s", type=float, default=2.0, help="each op's wait budget")
    ap.add_argument("--hang-s", type=float, default=120.0, help="a step that takes longer is a hang")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    world = kosmos.World(wait_budget_s=args.budget_s)
    P, r = world.size, world.rank
    soak = Soak(world, args.seed, args.budget_s, args.faults)
    counts = dict(calls=0, checked=0, wrong=0, unexpected_errors=0, faults=0)
    by_kind: dict[str, int] = {}
    surfaced: list[dict] = []
    wrong: list[dict] = []
    errors: list[str] = []
    start = time.monotonic()
    say = print if r == 0 else (lambda *a, **k: None)
    say(f"soak: world {P}, GPU {device_name()}, commit {git_commit()}, {args.calls} calls, faults {args.faults}, "
        f"budget {args.budget_s} s" + (" [ranks share a GPU]" if world.oversubscribed else ""), flush=True)
    for i in range(args.calls):
        if args.minutes is not None and world.comm.bcast(time.monotonic() - start > 60 * args.minutes, root=0):
            break
        # A step that outlives --hang-s is a hang: print every thread's stack and exit nonzero.
        faulthandler.dump_traceback_later(args.hang_s, exit=True)
        step = soak.draw()
        fault, who = step["fault"], step["who"]
        try:
            call, check = soak.run(step)
            world.synchronize()
            world.barrier()
        except Exception as e:  # noqa: BLE001 - an oracle or setup failure is a finding, not a crash
            errors.append(f"step {i} {step['kind']} setup: {type(e).__name__}: {e}")
            counts["unexpected_errors"] += 1
            continue
        counts["calls"] += 1
        by_kind[step["kind"]] = by_kind.get(step["kind"], 0) + 1
        t0 = time.monotonic()
        outcome = "ok"
        try:
            if fault == "late" and r == who:
                time.sleep(step["delay"])
            if fault in ("absent",) and r == who:
                out = None
                time.sleep(args.budget_s + 0.5)
            elif fault == "bad_arg" and r == who:
                try:
                    call(bad=True)
                    outcome = "bad argument accepted"
                except (ValueError, TypeError):
                    outcome = "refused"
                out = None
                time.sleep(args.budget_s + 0.5)
            else:
                out = call()
            world.synchronize()
            if fault in ("absent", "bad_arg"):
                outcome = "fault did not surface" if outcome != "bad argument accepted" else outcome
            elif out is not None and not check(out):
                outcome = "wrong"
        except KosmosTimeoutError as e:
            outcome = "surfaced" if fault in ("absent", "bad_arg") else f"unexpected timeout: {e}"
        except Exception as e:  # noqa: BLE001
            outcome = f"unexpected {type(e).__name__}: {e}"
        took = time.monotonic() - t0
        outcomes = world.comm.allgather(outcome)
        if fault in ("absent", "bad_arg"):
            counts["faults"] += 1
            times = world.comm.allgather(took)
            surfaced.append(dict(step=i, fault=fault, who=who, kind=step["kind"], outcomes=outcomes,
                                 seconds=[round(x, 3) for x in times]))
            world.clear_failure()
            soak.drop_plans()  # built before the failure: refused now
        else:
            counts["checked"] += 1
            if outcome == "wrong":
                counts["wrong"] += 1
                wrong.append(dict(step=i, **{k: v for k, v in step.items() if k != "counts"}))
            elif outcome != "ok":
                counts["unexpected_errors"] += 1
                errors.append(f"step {i} {step['kind']} fault={fault}: {outcome}")
                if isinstance(outcome, str) and "timeout" in outcome:
                    world.clear_failure()
                    soak.drop_plans()
        faulthandler.cancel_dump_traceback_later()
        if r == 0 and (i + 1) % 100 == 0:
            print(f"  {i + 1} steps, {time.monotonic() - start:.0f} s: {counts}", flush=True)
    all_counts = world.comm.gather(counts, root=0)
    all_errors = world.comm.gather(errors, root=0)
    all_wrong = world.comm.gather(wrong, root=0)
    if r == 0:
        bad_faults = [s for s in surfaced if any(o != "surfaced" and o != "refused" for o in s["outcomes"])
                      or max(s["seconds"]) > args.budget_s + 10]
        result = dict(commit=git_commit(), gpu=device_name(), world=P, oversubscribed=world.oversubscribed,
                      seed=args.seed, budget_s=args.budget_s, seconds=round(time.monotonic() - start, 1),
                      per_rank=all_counts, by_kind=by_kind, faults=surfaced, faults_not_surfacing=len(bad_faults),
                      wrong=all_wrong, errors=all_errors, hangs=0)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        path = Path(args.out) / f"soak_w{P}.json"
        path.write_text(json.dumps(result, indent=1, default=str))
        worst = max((max(s["seconds"]) for s in surfaced), default=0.0)
        print(f"\nworld {P}: {counts['calls']} calls, {sum(c['checked'] for c in all_counts) // P} checked, "
              f"{sum(c['wrong'] for c in all_counts)} wrong, {sum(c['unexpected_errors'] for c in all_counts)} "
              f"unexpected errors, {len(surfaced)} faults ({len(surfaced) - len(bad_faults)} surfaced on every "
              f"rank; slowest {worst:.2f} s), 0 hangs; {result['seconds']} s -> {path}")
        for e in sum(all_errors, [])[:10]:
            print("  error:", e)
    ok = world.comm.allreduce(0 if counts["wrong"] == 0 and counts["unexpected_errors"] == 0 else 1)
    world.finalize()
    return 1 if ok else 0


if __name__ == "__main__":
    sys.exit(main())
