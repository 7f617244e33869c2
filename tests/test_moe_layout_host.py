"""The MoE row layout (hipsrc/kosmos/moe/layout.h: where the dispatch pushes and the combine takes
rows) compiled for the host, against an explicit model of every rank's rows: random routings at
world sizes 1-8, with empty experts, empty ranks and one expert taking everything. For every
(expert, source) run, arena_row must be where the owner's arena holds that run (experts in order,
sources in order inside, each source's dispatch order inside) and source_row where the source's
dispatch order has it, so arena row arena_row + i is source row source_row + i for every i; and
own_output_row must find each row a rank's own experts hold in its arena (the backward's combine
folds those in place), -1 for the others.
"""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from kosmos.moe import reference

from host_build import build


@pytest.fixture(scope="module")
def layout_host(tmp_path_factory):
    return build("layout_main.cpp", tmp_path_factory.mktemp("layout") / "layout_host")


def case(rng, P, e_loc, k, kind):
    """Every rank's dispatch order as expert ids (reference.dispatch_order of a random routing)."""
    E = P * e_loc
    orders = []
    for s in range(P):
        t = 0 if kind == "empty_rank" and s == P - 1 else int(rng.integers(0, 40))
        if kind == "one_expert":
            experts = np.tile(np.arange(k), (t, 1))  # everybody picks experts 0..k-1
        else:
            hot = rng.choice(E, size=max(k, E // 3), replace=False) if kind == "empty_experts" else np.arange(E)
            experts = np.stack([rng.choice(hot, size=k, replace=False) for _ in range(t)]) if t else \
                np.zeros((0, k), np.int64)
        order, _ = reference.dispatch_order(experts, E)
        orders.append(experts.ravel()[order])  # the expert of each row, in dispatch order
    return orders


@pytest.mark.parametrize("P", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("kind", ["random", "empty_experts", "empty_rank", "one_expert"])
def test_arena_and_source_rows_match_the_model(layout_host, P, kind):
    rng = np.random.default_rng([P, len(kind)])
    e_loc, k = 3, 2
    E = P * e_loc
    orders = case(rng, P, e_loc, k, kind)
    counts = np.stack([np.bincount(o, minlength=E) for o in orders]).astype(np.int32)  # [P, E]
    out = subprocess.run([str(layout_host)], input=struct.pack("<3i", P, E, e_loc) + counts.tobytes(),
                         capture_output=True, check=True).stdout
    arena_row = np.frombuffer(out[:4 * E * P], np.int32).reshape(E, P)
    source_row = np.frombuffer(out[4 * E * P:8 * E * P], np.int32).reshape(E, P)
    own = np.frombuffer(out[8 * E * P:], np.int32)
    assert own.size == counts.sum()
    for o in range(P):  # the owner's arena, explicitly: (source, row in its dispatch order)
        arena = [(s, r) for g in range(o * e_loc, (o + 1) * e_loc) for s in range(P)
                 for r in np.flatnonzero(orders[s] == g)]
        for g in range(o * e_loc, (o + 1) * e_loc):
            for s in range(P):
                n = int(counts[s, g])
                if n == 0:
                    continue
                first = int(np.flatnonzero(orders[s] == g)[0])
                assert source_row[g, s] == first, (g, s)
                for i in range(n):  # the run is contiguous on both sides, in the same order
                    assert arena[arena_row[g, s] + i] == (s, first + i), (g, s, i)
        # own_output_row: each row of o's dispatch order, where o's own arena has it (-1: another
        # owner's expert has it)
        mine = own[counts[:o].sum():counts[:o + 1].sum()]
        want = [arena.index((o, r)) if orders[o][r] // e_loc == o else -1 for r in range(len(orders[o]))]
        assert mine.tolist() == want, o


def test_context_bytes_counts_what_a_forward_keeps():
    from kosmos.moe import MoEConfig
    from kosmos.moe.layer import context_bytes

    cfg = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=192, name="t")
    cap, t, pad = 1000, 300, 64
    want = cap * 3 * 192 * 2 + t * pad * 4 + 4 * t * 2 * 4  # [gate, up] + h, logits, routing
    assert context_bytes(cfg, cap, t, pad) == want
    assert context_bytes(cfg, cap, t, pad, expert_rows_copied=True) == want + (cap + t * 2) * 128 * 2
    assert context_bytes(cfg, cap, t, pad, expert_outputs_kept=True) == want + cap * 128 * 2
    shared = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=192, shared=1, shared_intermediate=64, name="s")
    assert context_bytes(shared, cap, t, pad) == want + t * 3 * 64 * 2
    dropping = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=192, capacity_factor=1.0, name="d")
    assert context_bytes(dropping, cap, t, pad) == want + t * 2  # the kept mask, a byte a pair


def test_launch_buffer_bytes_counts_the_fused_launches_outputs():
    from kosmos.moe import MoEConfig
    from kosmos.moe.layer import launch_buffer_bytes

    cap, t, pad = 1000, 300, 64
    cfg = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=192, name="t")
    forward = cap * (192 + 128) * 2                                    # h, expert outputs
    backward = cap * (2 * 192 + 128) * 2 + t * pad * 2 + t * 128 * 4 + t * 2 * 4  # d[gate, up], dX rows,
    # d logits, router dx, the fold's unit weights
    assert launch_buffer_bytes(cfg, cap, t, pad) == forward + backward
    assert launch_buffer_bytes(cfg, cap, t, pad, backwards=2) == forward + 2 * backward
    shared = MoEConfig(experts=8, top_k=2, hidden=128, intermediate=192, shared=1, shared_intermediate=64, name="s")
    assert launch_buffer_bytes(shared, cap, t, pad) == forward + backward + t * 2 * 64 * 2
