"""The TP+SP fused kernels against float64 references, on every rank of the world."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from kosmos.dtypes import bfloat16, float32
from kosmos.reference import rel_error
from kosmos.tp.ops import (AllGatherMatmul, BulkAllGatherMatmul, BulkReduceScatterMatmul, MatmulReduceScatter)

from .conftest import cupy, poisoned

TOL = 1e-2  # bf16 inputs and output, fp32 accumulation: relative Frobenius error vs float64


def arr(tag, rank, shape, scale=1.0):
    """Rank `rank`'s operand `tag`, fresh random bf16, never zero; any rank can rebuild it."""
    rng = np.random.default_rng([zlib.crc32(repr((tag, shape)).encode()), rank])
    return ((rng.standard_normal(shape) + 0.05) * scale).astype(bfloat16)


def f64(a):
    return np.asarray(a, np.float64)


def bits(a):
    return cupy.asnumpy(a).view(np.uint16)


SHAPES = [(128, 64, 64), (384, 192, 320), (256, 512, 128)]  # (m, n, k): tails in items and tiles


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("layout", ["TN", "NN"])
def test_all_gather_matmul(world, m, n, k, layout):
    P, r = world.size, world.rank
    row = k if layout == "TN" else n
    xs = [arr(("agx", layout), p, (m, row)) for p in range(P)]
    w = arr(("agw", layout), 0, (n, k), 0.1)
    op = AllGatherMatmul(world, m, n, k, layout=layout)
    out = poisoned(op.out_shape, bfloat16)
    op(cupy.asarray(xs[r]), cupy.asarray(w), out)
    world.synchronize()
    full = f64(np.concatenate(xs))
    ref = full @ f64(w).T if layout == "TN" else full @ f64(w)
    assert rel_error(cupy.asnumpy(out), ref) < TOL
    first = bits(out)
    kept = poisoned(op.gathered_shape, bfloat16)
    out2 = poisoned(op.out_shape, bfloat16)
    op(cupy.asarray(xs[r]), cupy.asarray(w), out2, gathered=kept)
    world.synchronize()
    np.testing.assert_array_equal(bits(out2), first)  # bitwise-equal rerun, into the caller's gathered array
    np.testing.assert_array_equal(bits(kept), np.concatenate(xs).view(np.uint16))


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("staging", [bfloat16, float32])
def test_matmul_reduce_scatter(world, m, n, k, staging):
    P, r = world.size, world.rank
    xs = [arr("rsx", p, (P * m, k)) for p in range(P)]
    ws = [arr("rsw", p, (n, k), 0.1) for p in range(P)]
    op = MatmulReduceScatter(world, m, n, k, staging_dtype=staging)
    out = poisoned((m, n), bfloat16)
    op(cupy.asarray(xs[r]), cupy.asarray(ws[r]), out)
    world.synchronize()
    ref = sum(f64(xs[p][r * m:(r + 1) * m]) @ f64(ws[p]).T for p in range(P))
    assert rel_error(cupy.asnumpy(out), ref) < TOL
    first = bits(out)
    op(cupy.asarray(xs[r]), cupy.asarray(ws[r]), out)
    world.synchronize()
    np.testing.assert_array_equal(bits(out), first)


@pytest.mark.parametrize("m,n,k", SHAPES[:2])
def test_bulk_all_gather_matmul(world, m, n, k):
    P, r = world.size, world.rank
    xs = [arr("bagx", p, (m, k)) for p in range(P)]
    dy = arr("bagdy", r, (P * m, n))
    w = arr("bagw", 0, (n, k), 0.1)
    op = BulkAllGatherMatmul(world, m, n, k)
    x = cupy.asarray(xs[r])
    x_full, dx = op(x, cupy.asarray(dy), cupy.asarray(w), dx=poisoned((P * m, k), bfloat16))
    world.synchronize()
    np.testing.assert_array_equal(bits(x_full), np.concatenate(xs).view(np.uint16))
    assert rel_error(cupy.asnumpy(dx), f64(dy) @ f64(w)) < TOL
    assert (x_full is x) == (P == 1)  # alone the gather is the identity: no copy
    kept = poisoned((P * m, k), bfloat16)
    x_full2, dx2 = op(x, cupy.asarray(dy), cupy.asarray(w), x_full=kept)
    world.synchronize()
    assert x_full2 is kept
    np.testing.assert_array_equal(bits(kept), np.concatenate(xs).view(np.uint16))
    np.testing.assert_array_equal(bits(dx2), bits(dx))


@pytest.mark.parametrize("m,n,k", SHAPES[:2])
@pytest.mark.parametrize("dw_dtype", [bfloat16, float32])
def test_bulk_reduce_scatter_matmul(world, m, n, k, dw_dtype):
    P, r = world.size, world.rank
    dxps = [arr("brsdx", p, (P * m, k)) for p in range(P)]
    dy = arr("brsdy", r, (P * m, n))
    x_full = arr("brsx", r, (P * m, k))
    op = BulkReduceScatterMatmul(world, m, n, k, dw_dtype=dw_dtype)
    dx, dw = op(cupy.asarray(dxps[r]), cupy.asarray(dy), cupy.asarray(x_full),
                dx=poisoned((m, k), bfloat16), dw=poisoned((n, k), dw_dtype))
    world.synchronize()
    exact = np.zeros((m, k), np.float32)
    for p in range(P):
        exact += dxps[p][r * m:(r + 1) * m].astype(np.float32)
    np.testing.assert_array_equal(cupy.asnumpy(dx).view(np.uint16), exact.astype(bfloat16).view(np.uint16))
    assert rel_error(cupy.asnumpy(dw), f64(dy).T @ f64(x_full)) < TOL
    dxp = cupy.asarray(dxps[r])
    dx2, dw2 = op(dxp, cupy.asarray(dy), cupy.asarray(x_full))  # no dx given: alone, dX is dXp itself
    world.synchronize()
    assert (dx2 is dxp) == (P == 1)
    np.testing.assert_array_equal(bits(dx2), bits(dx))
    np.testing.assert_array_equal(bits(dw2), bits(dw))


@pytest.mark.parametrize("dw_dtype,shape", [(bfloat16, "tail"), (float32, "tail"), (float32, "waves")])
def test_bulk_rs_nt_stream_k_is_the_plain_gemms(world, dw_dtype, shape, monkeypatch):
    """Bulk RS || NT with its wgrad in stream-K (forced through gemm.choose_stream_k), bitwise
    kosmos.matmul's stream-K on the same operands and builders, into poisoned outputs, twice (the
    tiles' arrival counters return to 0 in the kernel); dX exact. "tail": every tile cut into 2
    K-ranges; "waves": more than two waves of tiles (whole ones first) and 24+ slabs of K."""
    from kosmos import gemm

    if gemm.arch_path() != "wgmma":
        pytest.skip("stream-K is a Hopper path")
    P, r = world.size, world.rank
    if shape == "tail":
        m, n, k = 128 * -(-8 // P), 448, 320  # P * m >= 1024 tokens: 16+ slabs of K, two ranges of 8+
    else:
        m, n, k = 128 * -(-12 // P), 2304, 4096  # 288 tiles of 128 x 256, 24+ slabs
    monkeypatch.setattr(gemm, "choose_stream_k", lambda tiles, ctas, k_slabs: True)
    op = BulkReduceScatterMatmul(world, m, n, k, dw_dtype=dw_dtype)
    assert op.stream_k is not None, op.describe()
    assert (op.stream_k.full == 0) == (shape == "tail"), op.describe()
    dxps = [arr("brskdx", p, (P * m, k)) for p in range(P)]
    dy_h, x_h = arr("brskdy", r, (P * m, n)), arr("brskx", r, (P * m, k))
    dy, x_full = cupy.asarray(dy_h), cupy.asarray(x_h)
    want = gemm.matmul(dy, x_full, layout="NT", out_dtype=dw_dtype, sm_cap=op.builders, stream_k=True)
    exact = sum(dxps[p][r * m:(r + 1) * m].astype(np.float32) for p in range(P)).astype(bfloat16)
    for _ in range(2):
        dx, dw = op(cupy.asarray(dxps[r]), dy, x_full, dx=poisoned((m, k), bfloat16), dw=poisoned((n, k), dw_dtype))
        world.synchronize()
        np.testing.assert_array_equal(bits(dw), bits(want))
        np.testing.assert_array_equal(cupy.asnumpy(dx).view(np.uint16), exact.view(np.uint16))
    assert rel_error(cupy.asnumpy(dw), f64(dy_h).T @ f64(x_h)) < TOL


@pytest.mark.parametrize("width", [192, 128])
def test_every_tile_width_gives_the_same_answer(world, width, monkeypatch):
    """The five ops' builders on each Hopper tile width (forced through gemm.choose_tile_n), bitwise
    the 128 x 256 tile's: every width reduces in the same order. Every output has a partial last
    tile column in every width (448 columns: 1.75, 2.33, 3.5 tiles; 320: 1.25, 1.67, 2.5)."""
    from kosmos import gemm

    if gemm.arch_path() != "wgmma":
        pytest.skip("the narrow tiles are Hopper-only")
    m, n, k = 384, 448, 320
    P, r = world.size, world.rank
    x, w = cupy.asarray(arr("twx", r, (m, k))), cupy.asarray(arr("tww", 0, (n, k), 0.1))
    dy_m = cupy.asarray(arr("twdym", r, (m, n)))
    xr, wr = cupy.asarray(arr("twxr", r, (P * m, k))), cupy.asarray(arr("twwr", r, (n, k), 0.1))
    dy = cupy.asarray(arr("twdy", r, (P * m, n)))

    def run_all(tile_n):  # every output NaN-poisoned: a tile a width skipped cannot pass
        monkeypatch.setattr(gemm, "choose_tile_n", lambda tiles, ctas: tile_n)
        ops = [AllGatherMatmul(world, m, n, k), AllGatherMatmul(world, m, n, k, layout="NN"),
               MatmulReduceScatter(world, m, n, k), BulkAllGatherMatmul(world, m, n, k),
               BulkReduceScatterMatmul(world, m, n, k)]
        outs = [poisoned((P * m, n), bfloat16), poisoned((P * m, k), bfloat16), poisoned((m, n), bfloat16),
                poisoned((P * m, k), bfloat16), poisoned((n, k), bfloat16)]
        ops[0](x, w, outs[0])
        ops[1](dy_m, w, outs[1])
        ops[2](xr, wr, outs[2])
        ops[3](x, dy, w, dx=outs[3])
        ops[4](xr, dy, xr, dw=outs[4])
        world.synchronize()
        assert [op.tile_n for op in ops] == [tile_n] * 5
        got = [bits(o) for o in outs]
        assert not any(((g & 0x7FFF) > 0x7F80).any() for g in got), f"NaN left in an output at tile_n={tile_n}"
        return got

    base = run_all(256)
    for i, (got, want) in enumerate(zip(run_all(width), base)):
        np.testing.assert_array_equal(got, want, err_msg=f"op {i} at tile_n={width}")


@pytest.mark.parametrize("width", [192, 128])
@pytest.mark.parametrize("layout", ["TN", "NN"])
def test_two_way_builders_on_every_tile_width(world, width, layout, monkeypatch):
    """AG+GEMM with two-way movers (a builder CTA leaves the builder between tiles to gather, and
    comes back) on each Hopper tile width, bitwise the default op on 128 x 256 tiles: the builder's
    ring and, on the 128-wide ping-pong tile, its hand-over between the consumer warpgroups must
    survive the exits. 6 tile rows a rank, 1.75-3.5 tile columns."""
    from kosmos import gemm

    if gemm.arch_path() != "wgmma":
        pytest.skip("the narrow tiles are Hopper-only")
    m, n, k = 768, 448, 320  # TN: x [m, k], out [P m, n]; NN: x [m, n], out [P m, k]
    r = world.rank
    x = cupy.asarray(arr(("ttx", layout), r, (m, k if layout == "TN" else n)))
    w = cupy.asarray(arr(("ttw", layout), 0, (n, k), 0.1))
    base = bits(AllGatherMatmul(world, m, n, k, layout=layout)(x, w))
    monkeypatch.setattr(gemm, "choose_tile_n", lambda tiles, ctas: width)
    op = AllGatherMatmul(world, m, n, k, layout=layout, policy="two_way")
    assert op.tile_n == width
    for call in range(2):  # the second call on the ring the first left
        out = poisoned(op.out_shape, bfloat16)
        op(x, w, out)
        world.synchronize()
        np.testing.assert_array_equal(bits(out), base, err_msg=f"two-way at tile_n={width}, call {call}")


ABLATIONS = [dict(policy="fixed"), dict(policy="two_way"), dict(ag_order="chunk_major"), dict(ag_order="naive"),
             dict(mover_threads=128), dict(movers=1), dict(sm_cap=33)]


@pytest.mark.parametrize("switch", ABLATIONS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_ag_switches_give_the_same_answer(world, switch):
    m, n, k = 256, 192, 128
    r = world.rank
    x = cupy.asarray(arr("abx", r, (m, k)))
    w = cupy.asarray(arr("abw", 0, (n, k), 0.1))
    base = AllGatherMatmul(world, m, n, k)(x, w)
    other = AllGatherMatmul(world, m, n, k, **switch)(x, w)
    world.synchronize()
    np.testing.assert_array_equal(bits(other), bits(base))


@pytest.mark.parametrize("switch", [dict(policy="fixed"), dict(rs_order="row_major"), dict(movers=1), dict(sm_cap=16)],
                         ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_rs_switches_give_the_same_answer(world, switch):
    m, n, k = 256, 192, 128
    P, r = world.size, world.rank
    x = cupy.asarray(arr("rbx", r, (P * m, k)))
    w = cupy.asarray(arr("rbw", r, (n, k), 0.1))
    base = MatmulReduceScatter(world, m, n, k)(x, w)
    other = MatmulReduceScatter(world, m, n, k, **switch)(x, w)
    world.synchronize()
    np.testing.assert_array_equal(bits(other), bits(base))


def test_back_to_back_calls_of_different_shapes(world):
    """Several plans interleaved without host synchronization, each called with fresh inputs."""
    P, r = world.size, world.rank
    ops = [(AllGatherMatmul(world, 128, 128, 64), "ag1"), (MatmulReduceScatter(world, 256, 64, 128), "rs1"),
           (AllGatherMatmul(world, 256, 64, 192, layout="NN"), "ag2")]
    results = []
    for it in range(4):
        for op, tag in ops:
            if isinstance(op, MatmulReduceScatter):
                xs = [arr((tag, it), p, (P * op.m, op.k)) for p in range(P)]
                w = arr((tag, "w"), 0, (op.n, op.k), 0.1)
                results.append((op(cupy.asarray(xs[r]), cupy.asarray(w)),
                                sum(f64(xs[p][r * op.m:(r + 1) * op.m]) for p in range(P)) @ f64(w).T))
            else:
                row = op.row_elems
                xs = [arr((tag, it), p, (op.m, row)) for p in range(P)]
                w = arr((tag, "w"), 0, (op.n, op.k), 0.1)
                full = f64(np.concatenate(xs))
                results.append((op(cupy.asarray(xs[r]), cupy.asarray(w)),
                                full @ (f64(w).T if op.layout == "TN" else f64(w))))
    world.synchronize()
    for got, ref in results:
        assert rel_error(cupy.asnumpy(got), ref) < TOL


def test_bad_inputs_are_rejected(world):
    with pytest.raises(ValueError, match="multiple of 128"):
        AllGatherMatmul(world, 100, 64, 64)
    with pytest.raises(ValueError, match="multiple of 64"):
        MatmulReduceScatter(world, 128, 100, 64)
    with pytest.raises(ValueError, match="policy"):
        AllGatherMatmul(world, 128, 64, 64, policy="two_way_maybe")
    with pytest.raises(ValueError, match="two_way"):
        MatmulReduceScatter(world, 128, 64, 64, policy="two_way")
    op = AllGatherMatmul(world, 128, 64, 64)
    with pytest.raises(TypeError):
        op(cupy.zeros((128, 64), np.float32), cupy.zeros((64, 64), bfloat16))
    with pytest.raises(ValueError, match="shape"):
        op(cupy.zeros((64, 64), bfloat16), cupy.zeros((64, 64), bfloat16))
    world.synchronize()


def test_closed_plan_frees_its_heap_and_refuses_calls(world):
    from kosmos.errors import KosmosError

    x = cupy.asarray(arr("clx", world.rank, (128, 64)))
    w = cupy.asarray(arr("clw", 0, (64, 64), 0.1))
    with AllGatherMatmul(world, 128, 64, 64) as op:
        heap = op.heap
        op(x, w)
        world.synchronize()
    assert op.heap is None and heap.base == 0 and heap not in world._heaps
    with pytest.raises(KosmosError, match="closed"):
        op(x, w)
    with pytest.raises(KosmosError, match="closed"):
        op(x, w, cupy.empty(op.out_shape, x.dtype))  # new operand addresses: no cached arguments either
