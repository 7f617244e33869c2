"""GPU tests of kosmos.moe.MoEDispatch at any world size (ranks may share a GPU).

Every rank routes its own random tokens (uneven counts) on the device; the arena each owner ends
up with must equal, bitwise, the rows the host computes from every rank's inputs and routing
(expert-major over the local experts, source-major inside an expert, each source's dispatch
order inside); group_rows and run_rows exactly. Calls repeat with new routings (the counts slots
alternate by call parity), with a rank arriving late, and with a capacity too small (nothing moves,
every rank raises).
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


def routed(world, cfg, seed):
    """This rank's tokens and device routing; and every rank's (x, experts, order, start) on the host."""
    P, r = world.size, world.rank
    t = 50 + 29 * r
    x = rank_input(seed, r, (t, H), np.float32).astype(bfloat16)
    logits = rank_input(seed + 1, r, (t, 64), np.float32)
    rt = route(cupy.asarray(logits), cfg)
    mine = (x, cupy.asnumpy(rt.order), cupy.asnumpy(rt.start))
    return cupy.asarray(x), rt, world.comm.allgather(mine)


def expected_arena(world, cfg, everyone):
    me, e_loc, k = world.rank, cfg.experts // world.size, cfg.top_k
    rows, run_rows = [], np.zeros((e_loc, world.size), np.int32)
    for l in range(e_loc):
        g = me * e_loc + l
        for s, (x, order, start) in enumerate(everyone):
            toks = order[start[g]:start[g + 1]] // k
            rows.append(x[toks])
            run_rows[l, s] = len(toks)
    return np.concatenate(rows).view(np.uint16), run_rows


def test_rows_land_where_the_layout_says(world):
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=world.size * 200 * cfg.top_k)
    try:
        for call in range(3):
            x, rt, everyone = routed(world, cfg, seed=40 + call)
            if call == 2 and world.rank == world.size - 1:
                time.sleep(0.5)  # a late rank: the others wait in the counts exchange
            # Poison my arena: on my stream before my launch, so before any peer can push (peers push
            # only once they have my counts for this call, which my launch writes).
            disp.arena.local.view(np.uint8).fill(0xFF)
            arena, group_rows, run_rows = disp(x, rt, check=True)
            want, want_runs = expected_arena(world, cfg, everyone)
            got = cupy.asnumpy(arena).view(np.uint16).reshape(arena.shape[0], H)
            assert (got[:len(want)] == want).all(), f"call {call}: arena rows differ"
            assert (got[len(want):] == 0xFFFF).all(), "rows past the layout were written"
            assert (cupy.asnumpy(run_rows) == want_runs).all()
            assert (cupy.asnumpy(group_rows) == want_runs.sum(axis=1)).all()
    finally:
        disp.close()


def test_a_capacity_too_small_moves_nothing_on_any_rank(world):
    cfg = config(world)
    disp = MoEDispatch(world, cfg.experts, 2 * H, capacity_rows=8)
    try:
        x, rt, _ = routed(world, cfg, seed=3)
        disp.arena.local.view(np.uint8).fill(0xFF)
        with pytest.raises(KosmosError, match="capacity_rows = 8"):
            disp(x, rt, check=True)
        assert (cupy.asnumpy(disp.arena.local) == 0xFF).all()
    finally:
        disp.close()


def test_bad_arguments_are_refused(world):
    with pytest.raises(ValueError, match="multiple of the world size"):
        MoEDispatch(world, 0, 2 * H, 64)
    with pytest.raises(ValueError, match="multiple of 16"):
        MoEDispatch(world, 4 * world.size, 24, 64)
