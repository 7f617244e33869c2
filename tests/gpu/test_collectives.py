"""The standalone collectives against a float64 reference (and NCCL where ranks have their own GPU)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import kosmos
from kosmos.collectives import AllGather, AllToAll, ReduceScatter
from kosmos.dtypes import bfloat16, float32
from kosmos.reference import NcclBaseline, reduce_scatter_exact, reduce_scatter_f64, rel_error

from .conftest import cupy, poisoned, rank_input

TOL = {bfloat16: 8e-3, float32: 1e-6}  # relative Frobenius error vs float64, output rounded once


def seed_of(*parts) -> int:
    """A seed every rank derives alike (Python's str hash differs between processes)."""
    return zlib.crc32(repr(parts).encode())


def bits(a) -> np.ndarray:
    return cupy.asnumpy(a).view(np.uint8)


@pytest.mark.parametrize("dtype", [bfloat16, float32])
@pytest.mark.parametrize("shard", [(1, 8), (7, 24), (300, 520), (1000, 1032)])
def test_all_gather(world, dtype, shard):
    seed = seed_of(shard, str(dtype))
    x = cupy.asarray(rank_input(seed, world.rank, shard, dtype))
    out = poisoned((world.size * shard[0],) + shard[1:], dtype)
    kosmos.all_gather(world, x, out)
    world.synchronize()
    ref = np.concatenate([rank_input(seed, r, shard, dtype) for r in range(world.size)])
    np.testing.assert_array_equal(bits(out), ref.view(np.uint8))  # a copy is exact
    if NcclBaseline.available(world):
        nc = NcclBaseline(world)
        out2 = poisoned(out.shape, dtype)
        nc.all_gather(x, out2)
        world.synchronize()
        np.testing.assert_array_equal(bits(out2), bits(out))
        nc.close()


@pytest.mark.parametrize("dtype", [bfloat16, float32])
@pytest.mark.parametrize("rows_per_rank,cols", [(1, 8), (3, 40), (5, 24), (129, 520)])
def test_reduce_scatter(world, dtype, rows_per_rank, cols):
    shape = (world.size * rows_per_rank, cols)
    seed = seed_of(shape, str(dtype), "rs")
    x = cupy.asarray(rank_input(seed, world.rank, shape, dtype))
    out = poisoned((rows_per_rank, cols), dtype)
    kosmos.reduce_scatter(world, x, out)
    world.synchronize()
    inputs = [rank_input(seed, r, shape, dtype) for r in range(world.size)]
    got = cupy.asnumpy(out)
    assert rel_error(got, reduce_scatter_f64(inputs, world.rank)) < TOL[dtype]
    # fp32 sum in rank order, rounded once: the result is exact and reproducible.
    np.testing.assert_array_equal(got.view(np.uint8), reduce_scatter_exact(inputs, world.rank).view(np.uint8))
    if NcclBaseline.available(world):
        nc = NcclBaseline(world)
        out2 = poisoned(out.shape, dtype)
        nc.reduce_scatter(x, out2)
        world.synchronize()
        assert rel_error(cupy.asnumpy(out2), reduce_scatter_f64(inputs, world.rank)) < TOL[dtype]
        nc.close()


def a2a_counts(seed: int, world_size: int, skew: bool) -> np.ndarray:
    """[src, dst] rows: random, with zeros, or skewed so that rank 0 receives most of them."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 40, (world_size, world_size))
    if skew:
        c[:, 0] += 300
        c[:, -1] = 0
    return c


@pytest.mark.parametrize("dtype,row", [(bfloat16, (64,)), (float32, (20,)), (bfloat16, (8, 24))])
@pytest.mark.parametrize("skew", [False, True])
def test_all_to_all(world, dtype, row, skew):
    seed = seed_of(row, str(dtype), skew, "a2a")
    counts = a2a_counts(seed, world.size, skew)
    inputs = [rank_input(seed, r, (int(counts[r].sum()),) + row, dtype) for r in range(world.size)]
    x = cupy.asarray(inputs[world.rank])
    out, recv = kosmos.all_to_all(world, x, counts[world.rank])
    world.synchronize()
    np.testing.assert_array_equal(recv, counts[:, world.rank])
    parts = []
    for s in range(world.size):
        first = int(counts[s, :world.rank].sum())
        parts.append(inputs[s][first:first + int(counts[s, world.rank])])
    ref = np.concatenate(parts)
    np.testing.assert_array_equal(bits(out), ref.view(np.uint8))
    if NcclBaseline.available(world):
        nc = NcclBaseline(world)
        out2 = poisoned(out.shape, dtype)
        nc.all_to_all(x, counts[world.rank], out2, counts[:, world.rank])
        world.synchronize()
        np.testing.assert_array_equal(bits(out2), bits(out))
        nc.close()


def test_all_to_all_buckets_grow_and_are_reused(world):
    """The functional all_to_all's plans: a call that outgrows the cached bucket gets a bigger one
    (the smaller one freed on every rank), and smaller calls after it reuse it (no new bucket)."""
    row, dtype = (40,), bfloat16  # a row no other test passes (so no bucket of theirs in the cache)
    for it, extra in enumerate((0, 1500, 0)):  # rank 0 receives ~ 40 P, then ~ 1500 + 40 P, then ~ 40 P rows
        counts = a2a_counts(400 + it, world.size, skew=False)
        counts[:, 0] += extra // world.size
        z = cupy.asarray(rank_input(500 + it, world.rank, (int(counts[world.rank].sum()),) + row, dtype))
        out, recv = kosmos.all_to_all(world, z, counts[world.rank])
        world.synchronize()
        zs = [rank_input(500 + it, p, (int(counts[p].sum()),) + row, dtype) for p in range(world.size)]
        ref = np.concatenate([zs[s][int(counts[s, :world.rank].sum()):][:int(counts[s, world.rank])]
                              for s in range(world.size)])
        np.testing.assert_array_equal(bits(out), ref.view(np.uint8))
        np.testing.assert_array_equal(recv, counts[:, world.rank])
        caps = [k[3] for k in world._collective_plans if k[0] == "a2a" and k[1:3] == (row, np.dtype(dtype))]
        assert len(caps) == 1 and caps[0] >= int(counts.sum(axis=0).max()), caps
        assert caps[0] == (1024 if it == 0 else 2048), caps


def test_twenty_consecutive_calls_with_changing_inputs(world):
    """One plan per op, 20 calls back to back without host sync between them: epochs, not resets."""
    ag = AllGather(world, (33, 40), bfloat16)
    rs = ReduceScatter(world, (world.size * 17, 24), float32)
    a2a = AllToAll(world, 400 * world.size, (32,), bfloat16)
    outs = []
    for it in range(20):
        x = cupy.asarray(rank_input(it, world.rank, (33, 40), bfloat16))
        y = cupy.asarray(rank_input(100 + it, world.rank, rs.shape, float32))
        counts = a2a_counts(200 + it, world.size, skew=bool(it % 2))
        z = cupy.asarray(rank_input(300 + it, world.rank, (int(counts[world.rank].sum()), 32), bfloat16))
        outs.append((ag(x), rs(y), a2a(z, counts[world.rank])[0], counts))
    world.synchronize()
    for it, (g, r, a, counts) in enumerate(outs):
        ref = np.concatenate([rank_input(it, p, (33, 40), bfloat16) for p in range(world.size)])
        np.testing.assert_array_equal(bits(g), ref.view(np.uint8))
        ins = [rank_input(100 + it, p, rs.shape, float32) for p in range(world.size)]
        np.testing.assert_array_equal(bits(r), reduce_scatter_exact(ins, world.rank).view(np.uint8))
        zs = [rank_input(300 + it, p, (int(counts[p].sum()), 32), bfloat16) for p in range(world.size)]
        ref_a = np.concatenate([zs[s][int(counts[s, :world.rank].sum()):][:int(counts[s, world.rank])]
                                for s in range(world.size)])
        np.testing.assert_array_equal(bits(a), ref_a.view(np.uint8))


def test_bitwise_equal_reruns(world):
    shape = (world.size * 64, 264)
    x = cupy.asarray(rank_input(7, world.rank, shape, bfloat16))
    a = kosmos.reduce_scatter(world, x)
    b = kosmos.reduce_scatter(world, x)
    g1, g2 = kosmos.all_gather(world, x), kosmos.all_gather(world, x)
    world.synchronize()
    np.testing.assert_array_equal(bits(a), bits(b))
    np.testing.assert_array_equal(bits(g1), bits(g2))


def test_small_crews_and_items(world):
    """Crew size and item size are parameters: one CTA and tiny items still give the same answer."""
    x = cupy.asarray(rank_input(11, world.rank, (world.size * 9, 48), float32))
    ref = kosmos.reduce_scatter(world, x)
    for crew, item in [(1, 16), (3, 208), (7, 1024)]:
        rs = ReduceScatter(world, x.shape, float32, crew=crew, item_bytes=item)
        ag = AllGather(world, x.shape, float32, crew=crew, item_bytes=item)
        out, gathered = rs(x), ag(x)
        world.synchronize()
        np.testing.assert_array_equal(bits(out), bits(ref))
        want = np.concatenate([rank_input(11, r, x.shape, float32) for r in range(world.size)])
        np.testing.assert_array_equal(cupy.asnumpy(gathered), want)


def test_bad_inputs_raise_on_every_rank(world):
    good = cupy.asarray(rank_input(1, world.rank, (world.size * 4, 16), float32))
    bad = good.astype(np.float64) if world.rank == 0 else good
    with pytest.raises((TypeError, kosmos.KosmosError)):
        kosmos.reduce_scatter(world, bad)
    with pytest.raises(ValueError):
        kosmos.all_gather(world, good[:, ::2])  # not contiguous
    if world.size > 1:
        odd = cupy.asarray(rank_input(2, world.rank, (world.size * 4 + 1, 16), float32))
        with pytest.raises(ValueError, match="divide"):
            kosmos.reduce_scatter(world, odd)
    with pytest.raises((ValueError, kosmos.KosmosError)):
        kosmos.all_to_all(world, good, [1] * (world.size + 1))
    with pytest.raises(ValueError, match="multiple of 16"):
        AllGather(world, (3, 3), bfloat16)
    world.synchronize()
