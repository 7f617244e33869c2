"""GPU tests of kosmos.moe.MoECombine at any world size (ranks may share a GPU), and of the router's
backward reading a forward's combine that left the own rows in place.

Each owner's expert outputs are fresh random rows (not the dispatched tokens, so a row taken from
the wrong place shows); every rank's fold must match a float64 fold of the rows the host finds
through the layout (each token's k rows from their owners' outputs, weighted), within one bf16
rounding. own_in_place (the backward's combine: rows a rank's own experts hold are folded where
they are) must give bitwise the copying combine's output on the same inputs, and must really leave
those rows out of the combine buffer (poisoned before the call: still poisoned after) and leave
their table (own_runs) as the host computes it; the router's backward's pair gradients d w =
<Y_row, dY> must be bitwise the same whether it reads the own rows through that table or all rows
from a copying combine's buffer, and within fp32 sums of float64. Calls run
back to back (copy, in place, copy, ...), routings uneven (the last rank has no tokens at world >
1), one routing skewed onto two experts of rank 0, a rank arrives late; the output is NaN-poisoned
before every call.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.moe import MoECombine, MoEConfig, MoEDispatch, route  # noqa: E402
from kosmos.moe.layer import _backward_kernels  # noqa: E402
from kosmos.moe.router_grads import launch_router_grads, router_grads_record  # noqa: E402

from .conftest import poisoned, rank_input  # noqa: E402

H = 192  # 24 16-byte vectors: a fold pass (128 vectors a warp) with a ragged end


def tokens(world, rank):
    return 0 if (world.size > 1 and rank == world.size - 1) else 70 + 23 * rank


def host_fold(world, cfg, everyone, outputs, dy):
    """float64 y[t] = sum_j w[t, j] Y_o[row of (t, j)] for this rank's tokens and the bound of one
    bf16 rounding (2^-8 sum_j |w Y|); each pair's d w = <Y row, dy[t]> and the bound of fp32 sums
    (2^-14 sum |Y dy|); this rank's own runs (layout.h own_runs). everyone[s] = (order, start,
    weights) of source s; outputs[o]: owner o's expert output rows [rows, H] (bf16 as uint16)."""
    P, E, k, me = world.size, cfg.experts, cfg.top_k, world.rank
    e_loc = E // P
    counts = np.stack([np.diff(start) for _, start, _ in everyone])  # [P, E]
    order, start, weights = everyone[me]
    t = weights.size // k
    y, bound = np.zeros((t, H)), np.zeros((t, H))
    dw, dw_bound = np.zeros(t * k), np.zeros(t * k)
    own = np.zeros((3, e_loc), np.int32)
    for g in range(E):
        o = g // e_loc
        first = counts[:, o * e_loc:g].sum() + counts[:me, g].sum()  # layout.h arena_row
        rows = outputs[o][first:first + counts[me, g]].view(bfloat16).astype(np.float64)
        pairs = order[start[g]:start[g + 1]]
        terms = weights[pairs][:, None] * rows
        np.add.at(y, pairs // k, terms)
        np.add.at(bound, pairs // k, np.abs(terms))
        dw[pairs] = (rows * dy[pairs // k]).sum(axis=1)
        dw_bound[pairs] = np.abs(rows * dy[pairs // k]).sum(axis=1)
        if o == me:
            own[:, g - me * e_loc] = start[g], first, counts[me, g]
    return y, 2.0 ** -8 * bound + 1e-30, dw, 2.0 ** -14 * dw_bound + 1e-30, own


def own_rows(world, cfg, start):
    """The rows of this rank's dispatch order that its own experts hold."""
    e_loc = cfg.experts // world.size
    return slice(int(start[world.rank * e_loc]), int(start[(world.rank + 1) * e_loc]))


def test_the_fold_is_right_and_own_rows_stay_in_place(world):
    P, me = world.size, world.rank
    cfg = MoEConfig(experts=3 * P, top_k=2, hidden=H, intermediate=64)
    max_t = 200
    cap = P * max_t * cfg.top_k
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=cap)
    comb = MoECombine(world, cfg.experts, H, max_t, cfg.top_k)
    kernels = _backward_kernels(world)  # (a collective)
    try:
        failed = []
        for c in range(6):
            seed = 300 + c // 2  # calls 2c and 2c + 1: the same inputs, copied then in place
            in_place = c % 2 == 1
            t = tokens(world, me)
            x = cupy.asarray(rank_input(seed, me, (t, H), np.float32).astype(bfloat16))
            logits = rank_input(seed + 1, me, (t, 64), np.float32)
            if c >= 4:
                logits[:, :2] += 20.0  # skewed: every token picks experts 0 and 1 (rank 0's)
            rt = route(cupy.asarray(logits), cfg)
            y_e = cupy.asarray(rank_input(seed + 2, me, (cap, H), np.float32).astype(bfloat16))
            if c == 3 and me == P - 1:
                cupy.cuda.Device().synchronize()
                time.sleep(0.5)  # a late rank
            comb.comb.local.view(np.uint8).fill(0xFF)  # before my dispatch: peers push only after it
            disp(x, rt)
            out = comb(y_e, disp, rt, out=poisoned((t, H), bfloat16), own_in_place=in_place)
            buf = comb.comb.local.copy()
            dy = cupy.asarray(rank_input(seed + 3, me, (t, H), np.float32).astype(bfloat16))
            dw = poisoned((t, cfg.top_k), np.float32)
            own = {"own_y": y_e, "own_runs": comb.own_runs} if in_place else {}
            launch_router_grads(router_grads_record(
                cfg, logits=cupy.asarray(logits), chosen=rt.experts, start=rt.start, hidden=H, d_weights=dw,
                comb=comb.comb.local, slot=rt.slot, dy=dy, status=disp.status,
                d_logits_f32=cupy.empty((t, cfg.experts), np.float32), **own), kernels)
            own_runs = comb.own_runs.copy()
            cupy.cuda.Device().synchronize()
            world.status.raise_if_failed()
            mine = (cupy.asnumpy(rt.order), cupy.asnumpy(rt.start), cupy.asnumpy(rt.weights).ravel())
            everyone = world.comm.allgather(mine)
            outputs = world.comm.allgather(cupy.asnumpy(y_e).view(np.uint16))
            got = cupy.asnumpy(out).astype(np.float64)
            want, bound, want_dw, dw_bound, want_own = host_fold(world, cfg, everyone, outputs,
                                                                 cupy.asnumpy(dy).astype(np.float64))
            if not np.isfinite(got).all() or (np.abs(got - want) > bound).any():
                failed.append(f"call {c}: the fold is off by more than one bf16 rounding")
            got_dw = cupy.asnumpy(dw).ravel()
            kept = cupy.asnumpy(rt.slot) >= 0
            if not np.isfinite(got_dw[kept]).all() or (np.abs(got_dw - want_dw)[kept] > dw_bound[kept]).any():
                failed.append(f"call {c}: the router's d w is off by more than fp32 sums")
            if in_place:
                if not (cupy.asnumpy(out).view(np.uint16) == previous).all():
                    failed.append(f"call {c}: in place is not bitwise the copying combine")
                if not (got_dw.view(np.uint32) == previous_dw).all():
                    failed.append(f"call {c}: the router's d w through own_runs is not bitwise the copy's")
                if not (cupy.asnumpy(own_runs) == want_own).all():
                    failed.append(f"call {c}: own_runs {cupy.asnumpy(own_runs).tolist()} != {want_own.tolist()}")
                rows = cupy.asnumpy(buf).view(np.uint16).reshape(buf.shape[0], H)
                own = own_rows(world, cfg, mine[1])
                if not (rows[own] == 0xFFFF).all():
                    failed.append(f"call {c}: own rows were copied into the combine buffer")
                if not (rows[:own.start] != 0xFFFF).any(axis=1).all() or \
                        not (rows[own.stop:int(mine[1][-1])] != 0xFFFF).any(axis=1).all():
                    failed.append(f"call {c}: a peer's row did not land")
            previous, previous_dw = cupy.asnumpy(out).view(np.uint16), got_dw.view(np.uint32).copy()
        everyone = world.comm.allgather(failed)
        assert not any(everyone), f"rank {me}: {failed}; all ranks: {everyone}"
    finally:
        disp.close()
        comb.close()
