"""The cross-rank protocol under stress, on every rank: one plan on two streams, a rank that arrives
late, arguments refused on every rank alike (never a hang), a compile that fails on one rank, and
NaN / Inf / sentinel values through every reduce-scatter path.

Exact oracles: an AG op's output is bitwise our GEMM on the gathered operand (the same builder, the
same reduction order); TN+RS is bitwise the reduce-scatter of our GEMM's partials in the staging type.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import kosmos
from kosmos.collectives import RS_SENTINEL
from kosmos.dtypes import bf16_to_f32, bfloat16, copy_into, f32_to_bf16, float32
from kosmos.errors import KosmosCompileError, KosmosError
from kosmos.reference import reduce_scatter_exact
from kosmos.runtime import load_module
from kosmos.tp.ops import AllGatherMatmul, BulkReduceScatterMatmul, MatmulReduceScatter

from .conftest import cupy, poisoned
from .test_tp import arr, bits


def dev(tag, rank, shape, scale=1.0):
    return cupy.asarray(arr(tag, rank, shape, scale))


def ag_oracle(world, x, w):
    return bits(kosmos.matmul(kosmos.all_gather(world, x), w, "TN", tile_n=256))


def rs_oracle(world, x, w, staging):
    if staging == bfloat16:
        return bits(kosmos.reduce_scatter(world, kosmos.matmul(x, w, "TN", tile_n=256)))
    return bits(f32_to_bf16(kosmos.reduce_scatter(world, kosmos.matmul(x, w, "TN", out_dtype=float32, tile_n=256))))


def test_one_plan_on_two_streams(world):
    """Calls of one plan alternate between two non-blocking streams: each result is still exact."""
    P, r = world.size, world.rank
    m, n, k = 256, 192, 320
    ag, rs = AllGatherMatmul(world, m, n, k), MatmulReduceScatter(world, m, n, k)
    w = dev("2sw", 0, (n, k), 0.1)
    xs = [dev(("2sx", i), r, (m, k)) for i in range(6)]
    ws = dev("2srw", r, (n, k), 0.1)
    xr = [dev(("2sr", i), r, (P * m, k)) for i in range(6)]
    want = [(ag_oracle(world, xs[i], w), rs_oracle(world, xr[i], ws, bfloat16)) for i in range(6)]
    world.synchronize()  # the side streams do not wait for the legacy stream's work
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    got = []
    for i in range(6):
        s = streams[i % 2]
        got.append((ag(xs[i], w, stream=s), rs(xr[i], ws, stream=s), kosmos.matmul(xr[i], ws, "TN", stream=s, tile_n=256)))
    for s in streams:
        s.synchronize()
    world.synchronize()
    for i, (y, z, g) in enumerate(got):
        np.testing.assert_array_equal(bits(y), want[i][0], err_msg=f"AG+TN call {i}")
        np.testing.assert_array_equal(bits(z), want[i][1], err_msg=f"TN+RS call {i}")
        np.testing.assert_array_equal(bits(g), bits(kosmos.matmul(xr[i], ws, "TN", tile_n=256)), err_msg=f"GEMM call {i}")


@pytest.mark.parametrize("staging", [bfloat16, float32])
def test_a_late_rank(world, staging):
    """The last rank starts its calls 1.5 s after the others: they wait on the device, results are exact."""
    P, r = world.size, world.rank
    m, n, k = 256, 128, 192
    ag, rs = AllGatherMatmul(world, m, n, k), MatmulReduceScatter(world, m, n, k, staging_dtype=staging)
    x, w = dev("lx", r, (m, k)), dev("lw", 0, (n, k), 0.1)
    xr, wr = dev("lrx", r, (P * m, k)), dev("lrw", r, (n, k), 0.1)
    want_ag, want_rs = ag_oracle(world, x, w), rs_oracle(world, xr, wr, staging)
    world.synchronize()
    world.barrier()
    if r == P - 1:
        time.sleep(1.5)
    y, z = ag(x, w), rs(xr, wr)
    world.synchronize()
    np.testing.assert_array_equal(bits(y), want_ag)
    np.testing.assert_array_equal(bits(z), want_rs)


def test_refused_on_every_rank_alike(world):
    """Arguments that cannot run are refused on every rank before anything is allocated (no hang)."""
    P, r = world.size, world.rank
    heaps = len(world._heaps)
    if P > 1:
        with pytest.raises(ValueError, match="movers = 0 with policy 'one_way'"):
            AllGatherMatmul(world, 128, 128, 128, movers=0)
        AllGatherMatmul(world, 128, 128, 128, movers=0, policy="two_way").close()  # builders gather
        with pytest.raises(KosmosError, match="ranks disagree on AllGatherMatmul shape and switches"):
            AllGatherMatmul(world, 128, 128, 128, ag_order="naive" if r == P - 1 else "local_first")
        with pytest.raises(KosmosError, match="ranks disagree on MatmulReduceScatter shape and switches"):
            MatmulReduceScatter(world, 128, 128, 128, staging_dtype=np.float16 if r == 0 else bfloat16)
    with pytest.raises(ValueError, match="mover_threads must be a multiple of 32"):
        AllGatherMatmul(world, 128, 128, 128, mover_threads=33)
    with pytest.raises(TypeError, match="staging_dtype must be bfloat16 or float32"):
        MatmulReduceScatter(world, 128, 128, 128, staging_dtype=np.float16)
    with pytest.raises(ValueError, match="rs_order must be one of"):
        MatmulReduceScatter(world, 128, 128, 128, rs_order="sideways")
    assert len(world._heaps) == heaps  # nothing was allocated


def test_outputs_that_alias_inputs_are_refused(world):
    P, r = world.size, world.rank
    buf = poisoned((P * 128, 256), bfloat16)
    x = copy_into(buf[:128], dev("ax", r, (128, 256)))
    with pytest.raises(ValueError, match="out overlaps x"):
        kosmos.all_gather(world, x, out=buf)
    a = dev("aa", r, (256, 256))
    with pytest.raises(ValueError, match="out overlaps a"):
        kosmos.matmul(a, a, "TN", out=a)
    ag = AllGatherMatmul(world, 128, 128, 256)
    with pytest.raises(ValueError, match="gathered overlaps x"):
        ag(x, dev("aw", 0, (128, 256)), gathered=buf)
    world.synchronize()


def test_a_compile_failure_on_one_rank_raises_on_every_rank(world):
    bad = ("--no-such-nvrtc-option",) if world.local_rank == 0 else ("-DKOSMOS_COMPILE_PROBE=1",)
    with pytest.raises(KosmosError) as e:
        load_module("timing.hip", world=world, extra_options=bad)
    if world.local_rank == 0:
        assert isinstance(e.value, KosmosCompileError)
    else:
        assert "another rank failed to compile hipsrc/timing.hip: rank 0: KosmosCompileError" in str(e.value)
    assert world.comm.allreduce(1) == world.size  # every rank is still in step


# ---- NaN, Inf and the sentinel's own bit pattern through every reduce-scatter path ----
def specials(dtype, rank, shape):
    """Fresh random values with NaN, +Inf, -Inf and the staging sentinel's bits at rank-dependent places."""
    x = arr(("sp", str(dtype)), rank, shape).astype(dtype)
    flat = x.reshape(-1).view(np.uint16 if dtype == bfloat16 else np.uint32)
    n = flat.size
    picks = [(7 * rank + 3) % n, (11 * rank + 5) % n, (13 * rank + 17) % n, (5 * rank + 29) % n]
    vals = np.array([np.nan, np.inf, -np.inf], dtype).view(flat.dtype)
    flat[picks[0]], flat[picks[1]], flat[picks[2]] = vals
    flat[picks[3]] = RS_SENTINEL[np.dtype(dtype)]
    return x


def exact_with_specials(inputs, rank):
    with np.errstate(invalid="ignore"):  # Inf - Inf is NaN, as on the device
        return reduce_scatter_exact(inputs, rank)


def same_specials(got, ref):
    """NaN where the reference has NaN (payloads may differ), every other value bitwise."""
    g, rf = np.asarray(got), np.asarray(ref)
    nan_g, nan_r = np.isnan(g.astype(np.float32)), np.isnan(rf.astype(np.float32))
    np.testing.assert_array_equal(nan_g, nan_r)
    itype = np.uint16 if g.dtype.itemsize == 2 else np.uint32
    np.testing.assert_array_equal(g[~nan_g].view(itype), rf[~nan_r].view(itype))


@pytest.mark.parametrize("dtype", [bfloat16, float32])
def test_specials_through_reduce_scatter(world, dtype):
    P, r = world.size, world.rank
    shape = (P * 24, 40)
    inputs = [specials(dtype, p, shape) for p in range(P)]
    got = kosmos.reduce_scatter(world, cupy.asarray(inputs[r]))
    world.synchronize()
    same_specials(cupy.asnumpy(got), exact_with_specials(inputs, r))


@pytest.mark.parametrize("staging", [bfloat16, float32])
def test_nan_and_inf_operands_through_tn_rs(world, staging):
    """NaN and Inf in the GEMM operands make NaN/Inf partials; the reduce-scatter completes on them."""
    P, r = world.size, world.rank
    m, n, k = 128, 128, 192
    x, w = arr("snx", r, (P * m, k)), arr("snw", r, (n, k), 0.1)
    x[(5 + r) % (P * m), 3] = np.nan
    w[(9 + 2 * r) % n, 7] = np.inf
    rs = MatmulReduceScatter(world, m, n, k, staging_dtype=staging)
    got = rs(cupy.asarray(x), cupy.asarray(w))
    want = rs_oracle(world, cupy.asarray(x), cupy.asarray(w), staging)
    world.synchronize()
    same_specials(cupy.asnumpy(got), want.view(bfloat16))


def test_specials_through_bulk_rs(world):
    P, r = world.size, world.rank
    m, n, k = 128, 64, 128
    parts = [specials(bfloat16, p, (P * m, k)) for p in range(P)]
    dy, xf = dev("sbdy", r, (P * m, n)), dev("sbx", r, (P * m, k))
    op = BulkReduceScatterMatmul(world, m, n, k)
    dx, dw = op(cupy.asarray(parts[r]), dy, xf)
    world.synchronize()
    same_specials(cupy.asnumpy(dx), exact_with_specials(parts, r) if P > 1 else parts[r])
    np.testing.assert_array_equal(bits(dw), bits(kosmos.matmul(dy, xf, "NT", tile_n=256)))


def test_bf16_helpers_keep_specials():
    v = cupy.asarray(np.array([np.nan, np.inf, -np.inf, 1.5], np.float32))
    back = cupy.asnumpy(bf16_to_f32(f32_to_bf16(v)))
    assert np.isnan(back[0]) and back[1] == np.inf and back[2] == -np.inf and back[3] == 1.5


# ---- failures are collective: one rank's timeout reaches every rank within a polling interval ----
def probe(world, budget_s):
    """A one-CTA kernel whose wait nobody ever satisfies, with its own budget."""
    from kosmos.runtime import PersistentLaunch, kernel_id

    mod = load_module("collectives.hip", world=world)
    launch = PersistentLaunch.checked(mod.get_function("kosmos_wait_probe"), 1, 32)
    flag = cupy.zeros(1, np.uint64)
    launch((flag, np.uint64(1), world.status.wait_ctx(kernel_id("KERNEL_WAIT_PROBE"), budget_s=budget_s)))
    return flag


def test_one_ranks_timeout_stops_every_rank(world):
    """Rank 0 gives up after 0.3 s; the others, with a 60 s budget, stop as soon as they are told."""
    P, r = world.size, world.rank
    if P == 1:
        pytest.skip("needs peers")
    before = AllGatherMatmul(world, 128, 128, 128)
    world.barrier()
    start = time.monotonic()
    keep = probe(world, 0.3 if r == 0 else 60.0)
    with pytest.raises(kosmos.KosmosTimeoutError) as e:
        world.synchronize()
    took = time.monotonic() - start
    del keep
    assert took < 20, f"rank {r} learned of the failure after {took:.1f} s"
    if r == 0:
        assert e.value.failed_peer is None and e.value.site == "SITE_PROBE"
    else:
        assert e.value.failed_peer == 0 and "because rank 0 failed first" in str(e.value)
    world.clear_failure()
    x, w = dev("fx", r, (128, 128)), dev("fw", 0, (128, 128))
    with pytest.raises(KosmosError, match="built before a device timeout"):
        before(x, w)  # refused on every rank, not only where the timeout happened
    after = AllGatherMatmul(world, 128, 128, 128)
    np.testing.assert_array_equal(bits(after(x, w)), ag_oracle(world, x, w))  # new plans run
    world.synchronize()


OPS = {
    "all_gather": lambda world: (kosmos.collectives.AllGather(world, (128, 64), bfloat16),
                                 lambda op, r: op(dev("to", r, (128, 64)))),
    "reduce_scatter": lambda world: (kosmos.collectives.ReduceScatter(world, (world.size * 64, 64), bfloat16),
                                     lambda op, r: op(dev("to", r, (world.size * 64, 64)))),
    "ag_tn": lambda world: (AllGatherMatmul(world, 128, 128, 128),
                            lambda op, r: op(dev("to", r, (128, 128)), dev("tw", 0, (128, 128)))),
    "tn_rs": lambda world: (MatmulReduceScatter(world, 128, 128, 128),
                            lambda op, r: op(dev("to", r, (world.size * 128, 128)), dev("tw", r, (128, 128)))),
    "bulk_ag_nn": lambda world: (kosmos.tp.ops.BulkAllGatherMatmul(world, 128, 128, 128),
                                 lambda op, r: op(dev("to", r, (128, 128)), dev("ty", r, (world.size * 128, 128)),
                                                  dev("tw", 0, (128, 128)))),
    "bulk_rs_nt": lambda world: (BulkReduceScatterMatmul(world, 128, 128, 128),
                                 lambda op, r: op(dev("to", r, (world.size * 128, 128)),
                                                  dev("ty", r, (world.size * 128, 128)),
                                                  dev("tx", r, (world.size * 128, 128)))),
}


@pytest.mark.parametrize("kind", OPS)
def test_a_rank_that_never_calls(world, kind):
    """The last rank skips the call: the others give up after the op's budget, and every rank,
    the absent one included, learns of it at its next synchronize."""
    P, r = world.size, world.rank
    if P == 1:
        pytest.skip("needs peers")
    op, call = OPS[kind](world)
    op.wait_budget_s = 1.0
    world.synchronize()
    world.barrier()
    start = time.monotonic()
    if r != P - 1:
        call(op, r)
    else:
        time.sleep(1.5)
    with pytest.raises(kosmos.KosmosTimeoutError) as e:
        world.synchronize()
    assert time.monotonic() - start < 20
    if r == P - 1:
        assert e.value.failed_peer is not None and e.value.failed_peer != r
    world.clear_failure()
    world.synchronize()


# ---- shapes of >= 3 waves of tiles on 132 SMs: every CTA builds several tiles ----
WAVES = {  # (m rows per rank, n, k): >= 396 output tiles of 128 x 256 at every world size
    "ag_tn": (1536, 8704, 128), "tn_rs": (1536, 8704, 128), "bulk_ag_nn": (1536, 128, 8704),
    "bulk_rs_nt": (128, 3072, 4352),
}


@pytest.mark.parametrize("kind", WAVES)
def test_every_cta_builds_several_tiles(world, kind):
    """The producer blocks on its next tile, TMA store slots are reused, builders re-claim: still bitwise
    equal to the exact oracles (our collectives and our GEMM on the same operands)."""
    P, r = world.size, world.rank
    m, n, k = WAVES[kind]
    if kind == "ag_tn":
        x, w = dev("wx", r, (m, k)), dev("ww", 0, (n, k), 0.1)
        np.testing.assert_array_equal(bits(AllGatherMatmul(world, m, n, k)(x, w)), ag_oracle(world, x, w))
    elif kind == "tn_rs":
        x, w = dev("wrx", r, (P * m, k)), dev("wrw", r, (n, k), 0.1)
        np.testing.assert_array_equal(bits(MatmulReduceScatter(world, m, n, k)(x, w)), rs_oracle(world, x, w, bfloat16))
    elif kind == "bulk_ag_nn":
        x, dy, w = dev("wbx", r, (m, k)), dev("wbdy", r, (P * m, n)), dev("wbw", 0, (n, k), 0.1)
        x_full, dx = kosmos.tp.ops.BulkAllGatherMatmul(world, m, n, k)(x, dy, w)
        np.testing.assert_array_equal(bits(x_full), bits(kosmos.all_gather(world, x)))
        np.testing.assert_array_equal(bits(dx), bits(kosmos.matmul(dy, w, "NN", tile_n=256)))
    else:
        dxp, dy, xf = dev("wsp", r, (P * m, k)), dev("wsdy", r, (P * m, n)), dev("wsx", r, (P * m, k))
        dx, dw = BulkReduceScatterMatmul(world, m, n, k)(dxp, dy, xf)
        np.testing.assert_array_equal(bits(dx), bits(kosmos.reduce_scatter(world, dxp)))
        np.testing.assert_array_equal(bits(dw), bits(kosmos.matmul(dy, xf, "NT", tile_n=256)))
    world.synchronize()
