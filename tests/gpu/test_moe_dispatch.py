"""GPU tests of kosmos.moe.MoEDispatch at any world size (ranks may share a GPU).

Every rank routes its own random tokens (uneven counts, the last rank none) on the device; the
arena each owner ends up with must equal, bitwise, the rows the host computes from every rank's
inputs and routings (expert-major over the local experts, source-major inside an expert, each
source's dispatch order inside); group_rows and run_rows exactly; the (expert, source) arrival
flags at this call's epoch exactly where a run is non-empty. Calls run back to back without a host
sync (snapshots taken on the stream), so the call-parity counts slots and the per-call counters are
exercised; items of 3 rows make runs of several items; a rank arrives late; a capacity too small
and a rank that refuses its input move nothing anywhere, and the next call works.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.errors import KosmosError  # noqa: E402
from kosmos.moe import MoEConfig, MoEDispatch, route  # noqa: E402

from .conftest import rank_input  # noqa: E402

H = 128


def config(world):
    return MoEConfig(experts=4 * world.size, top_k=2, hidden=H, intermediate=64)


def tokens(world, rank):
    return 0 if (world.size > 1 and rank == world.size - 1) else 50 + 29 * rank


def routed(world, cfg, seed):
    """This rank's tokens and device routing; and every rank's (x, order, start) on the host."""
    t = tokens(world, world.rank)
    x = rank_input(seed, world.rank, (t, H), np.float32).astype(bfloat16)
    logits = rank_input(seed + 1, world.rank, (t, 64), np.float32)
    rt = route(cupy.asarray(logits), cfg)
    mine = (x, cupy.asnumpy(rt.order), cupy.asnumpy(rt.start), cupy.asnumpy(rt.weights).ravel())
    return cupy.asarray(x), rt, world.comm.allgather(mine)


def expected_arena(world, cfg, everyone, weighted=False):
    """weighted: each row times its pair's routing weight in fp32, rounded to bf16 once."""
    me, e_loc, k = world.rank, cfg.experts // world.size, cfg.top_k
    width = everyone[0][0].shape[1]
    rows, run_rows = [np.zeros((0, width), bfloat16)], np.zeros((e_loc, world.size), np.int32)
    for l in range(e_loc):
        g = me * e_loc + l
        for s, (x, order, start, *weights) in enumerate(everyone):  # weights: [T * k] (routed())
            pairs = order[start[g]:start[g + 1]]
            got = x[pairs // k]
            if weighted:
                got = (got.astype(np.float32) * weights[0][pairs][:, None]).astype(bfloat16)
            rows.append(got)
            run_rows[l, s] = len(pairs)
    return np.concatenate(rows).view(np.uint16), run_rows


@pytest.mark.parametrize("item_rows", [None, 3])
def test_rows_land_where_the_layout_says(world, item_rows):
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=world.size * 200 * cfg.top_k, item_rows=item_rows)
    try:
        calls = [routed(world, cfg, seed=40 + c) for c in range(4)]
        snaps = []
        cupy.cuda.Device().synchronize()
        for c, (x, rt, _) in enumerate(calls):
            if c == 2 and world.rank == world.size - 1:
                time.sleep(0.5)  # a late rank: the others wait in the counts exchange
            # Poisoned on my stream before my launch, so before any peer pushes (peers push only
            # once they have my counts for this call, which my launch writes).
            disp.arena.local.view(np.uint8).fill(0xFF)
            arena, group_rows, run_rows = disp(x, rt)  # no check: no host sync between calls
            snaps.append((arena.copy(), group_rows.copy(), run_rows.copy(), disp.arrived.local.copy()))
        cupy.cuda.Device().synchronize()
        world.status.raise_if_failed()
        assert int(disp.status.get()[0]) == 0
        assert int(disp.calls[0].get()) == disp.epoch, "the device's call count (the launches' epochs)"
        for c, ((_, _, everyone), (arena, group_rows, run_rows, arrived)) in enumerate(zip(calls, snaps)):
            want, want_runs = expected_arena(world, cfg, everyone)
            got = cupy.asnumpy(arena).view(np.uint16).reshape(arena.shape[0], H)
            assert (got[:len(want)] == want).all(), f"call {c}: arena rows differ"
            assert (got[len(want):] == 0xFFFF).all(), f"call {c}: rows past the layout were written"
            assert (cupy.asnumpy(run_rows) == want_runs).all(), c
            assert (cupy.asnumpy(group_rows) == want_runs.sum(axis=1)).all(), c
            # Taken after my launch of call c, before my launch of c + 1 (which peers wait for before
            # pushing again): exactly the non-empty runs of call c carry its epoch.
            flags = cupy.asnumpy(arrived)[:, :world.size]
            epoch = disp.epoch - (len(calls) - 1 - c)
            assert ((flags == epoch) == (want_runs > 0)).all(), c
    finally:
        disp.close()


def test_weighted_rows_are_scaled_once(world):
    """weighted=True (the backward's router-weighted dY): every pushed row is its token's row times
    the pair's fp32 weight, rounded to bf16 once, bitwise as NumPy computes it; back-to-back calls,
    items of 3 rows; unweighted calls between them stay plain copies."""
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=world.size * 200 * cfg.top_k, item_rows=3)
    try:
        calls = [routed(world, cfg, seed=60 + c) for c in range(3)]
        snaps = []
        cupy.cuda.Device().synchronize()
        for c, (x, rt, _) in enumerate(calls):
            disp.arena.local.view(np.uint8).fill(0xFF)
            arena, _, _ = disp(x, rt, weighted=c != 1)
            snaps.append(arena.copy())
        cupy.cuda.Device().synchronize()
        world.status.raise_if_failed()
        for c, ((_, _, everyone), arena) in enumerate(zip(calls, snaps)):
            want, _ = expected_arena(world, cfg, everyone, weighted=c != 1)
            got = cupy.asnumpy(arena).view(np.uint16).reshape(arena.shape[0], H)
            assert (got[:len(want)] == want).all(), f"call {c}: arena rows differ"
            assert (got[len(want):] == 0xFFFF).all(), f"call {c}: rows past the layout were written"
        with pytest.raises(TypeError, match="weighted rows are bf16"):
            disp(cupy.zeros((tokens(world, world.rank), 2 * H), np.uint8), calls[0][1], weighted=True, check=True)
        if world.size > 1:
            world.synchronize()
        disp(*calls[0][:2], check=True)  # the refusal reached every rank; the next call works
    finally:
        disp.close()


def test_a_capacity_too_small_moves_nothing_on_any_rank(world):
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=8)
    try:
        one = cupy.asarray(rank_input(4, world.rank, (1, H), np.float32).astype(bfloat16))
        rt1 = route(cupy.asarray(rank_input(5, world.rank, (1, 64), np.float32)), cfg)
        fits = world.size <= 4  # world.size * k = 2 rows per owner at most: they fit in 8
        if fits:  # good calls first: the failed one must still reset the next call's queue heads
            for _ in range(2):
                disp(one, rt1, check=True)
        x, rt, _ = routed(world, cfg, seed=3)
        disp.arena.local.view(np.uint8).fill(0xFF)
        with pytest.raises(KosmosError, match="capacity_rows = 8"):
            disp(x, rt, check=True)
        assert (cupy.asnumpy(disp.arena.local) == 0xFF).all()
        assert int(disp.group_rows.sum()) == 0 and int(disp.run_rows.sum()) == 0
        if fits:
            for _ in range(2):  # the next calls work and move their rows
                disp(one, rt1, check=True)
                moved = world.comm.allreduce(int(disp.group_rows.sum()))
                assert moved == world.size * cfg.top_k, moved  # every rank's token, k rows each
    finally:
        disp.close()


def test_a_rank_that_refuses_its_input_stops_every_rank(world):
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=world.size * 200 * cfg.top_k)
    try:
        x, rt, _ = routed(world, cfg, seed=6)
        bad = world.rank == 0
        if bad:
            x = cupy.zeros((x.shape[0], H + 8), np.uint16).view(bfloat16)  # rows of the wrong width
        with pytest.raises(ValueError if bad else KosmosError, match="rows of 256 B" if bad else "refused"):
            disp(x, rt, check=True)
        if bad:
            world.synchronize()
        assert int(disp.status.get()[0]) == -1
        x, rt, _ = routed(world, cfg, seed=7)
        disp(x, rt, check=True)  # and the next call works
    finally:
        disp.close()


def test_bad_arguments_are_refused(world):
    with pytest.raises(ValueError, match="multiple of the world size"):
        MoEDispatch(world, 0, 2 * H, 64)
    with pytest.raises(ValueError, match="multiple of 16"):
        MoEDispatch(world, 4 * world.size, 24, 64)
    with pytest.raises(ValueError, match="item_rows"):
        MoEDispatch(world, 4 * world.size, 2 * H, 64, item_rows=0)

