"""The TP+SP ops with MXFP8 operands (precision="mxfp8"): movers gather E4M3 codes and E8M0 scales,
kept in MXFP8 for the MXFP8-A builders (AG+TN / AG+NN where kosmos.matmul keeps A in MXFP8) or
dequantized into a bf16 gathered array. Exact oracles: kosmos.matmul on the gathered MXFP8 operand,
the bf16 op on the reference-dequantized operands (kosmos.mx.dequantize, NumPy) where the movers
dequantize, and the gathered array bitwise the shards (codes and scales, or their dequantization);
plus a float64 check."""
from __future__ import annotations

import time

import numpy as np
import pytest

from kosmos import mx
from kosmos.dtypes import bfloat16
from kosmos.reference import rel_error
from kosmos import gemm
from kosmos.tp.ops import (AllGatherMatmul, AllGatherMatmulNNNT, BulkAllGatherMatmul, BulkReduceScatterMatmul,
                           MatmulReduceScatter)

from .conftest import cupy, poisoned
from .test_tp import SHAPES, arr, bits, f64

TOL = 1e-2  # vs float64 of the dequantized operands: bf16 output, fp32 accumulation


def quantized(tag, rank, shape, axis, scale=1.0):
    """(rank's MXFP8 copy on the GPU, its exact bf16 dequantization on the host)."""
    return quantize_pair(arr(tag, rank, shape, scale), axis)


@pytest.mark.parametrize("m,n,k", SHAPES + [(1024, 2048, 256)])  # the last: several tiles a CTA at P >= 2
@pytest.mark.parametrize("layout", ["TN", "NN"])
@pytest.mark.parametrize("route", ["kept", "dequantized"])
def test_all_gather_matmul_mxfp8(world, m, n, k, layout, route, monkeypatch):
    """AG+TN / AG+NN on MXFP8 shards. "kept" (where kosmos.matmul keeps A in MXFP8: Hopper, these
    widths): the gathered array stays MXFP8 and the builders dequantize in registers; "dequantized"
    (gemm.MX_A_MAX_COLUMNS = 0 forces the other route, in the op and in its oracle alike): movers
    dequantize into bf16. Either way out is bitwise kosmos.matmul on the gathered MXFP8 operand (the
    same tile width), the gathered array bitwise the shards, and the bf16 op on the dequantized
    operands is the oracle of the dequantized route."""
    if route == "dequantized":
        monkeypatch.setattr(gemm, "MX_A_MAX_COLUMNS", 0)
    P, r = world.size, world.rank
    row = k if layout == "TN" else n
    shards = [quantized(("mxagx", layout), p, (m, row), axis=1) for p in range(P)]
    w_mx, w = quantized(("mxagw", layout), 0, (n, k), axis=1 if layout == "TN" else 0, scale=0.1)
    full = np.concatenate([s[1] for s in shards])
    full_mx = mx.DeviceMX(*(cupy.concatenate([getattr(s[0], f) for s in shards]) for f in ("data", "scales")), 1)
    op = AllGatherMatmul(world, m, n, k, layout=layout, precision="mxfp8")
    assert op.keeps_mx == (route == "kept" and gemm.arch_path() == "wgmma")
    out = poisoned(op.out_shape, bfloat16)
    if op.keeps_mx:
        kept = mx.DeviceMX(poisoned(full_mx.data.shape, np.uint8), poisoned(full_mx.scales.shape, np.uint8), 1)
    else:
        kept = poisoned(op.gathered_shape, bfloat16)
    op(shards[r][0], w_mx, out, gathered=kept)
    want = gemm.matmul(full_mx, w_mx, layout, tile_n=op.tile_n)
    world.synchronize()
    if op.keeps_mx:  # the gather copied codes and scales exactly
        np.testing.assert_array_equal(cupy.asnumpy(kept.data), cupy.asnumpy(full_mx.data))
        np.testing.assert_array_equal(cupy.asnumpy(kept.scales), cupy.asnumpy(full_mx.scales))
    else:  # the gather dequantized exactly, and the result is the bf16 op's
        np.testing.assert_array_equal(bits(kept), full.view(np.uint16))
        bf16_op = AllGatherMatmul(world, m, n, k, layout=layout)(cupy.asarray(shards[r][1]), cupy.asarray(w))
        world.synchronize()
        np.testing.assert_array_equal(bits(out), bits(bf16_op))
    np.testing.assert_array_equal(bits(out), bits(want))
    ref = f64(full) @ (f64(w).T if layout == "TN" else f64(w))
    assert rel_error(cupy.asnumpy(out), ref) < TOL
    # A bf16 weight, the plan's own gathered array; then a bf16 array keeping the gathered operand
    out2, kept2 = poisoned(op.out_shape, bfloat16), poisoned(op.gathered_shape, bfloat16)
    op(shards[r][0], cupy.asarray(w), out2)
    out3 = op(shards[r][0], w_mx, gathered=kept2)
    world.synchronize()
    np.testing.assert_array_equal(bits(out2), bits(out))
    np.testing.assert_array_equal(bits(out3), bits(out))
    np.testing.assert_array_equal(bits(kept2), full.view(np.uint16))


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("movers", [None, 1])
@pytest.mark.parametrize("route", ["kept", "dequantized"])
def test_ag_nn_nt_is_the_dgrad_and_the_wgrad(world, m, n, k, movers, route, monkeypatch):
    """AG+NN(+NT): dX bitwise kosmos.matmul on the gathered row-wise dY (MXFP8-A builders on the kept
    copy, or, MX_A_MAX_COLUMNS = 0, the bf16 AG+NN on the dequantized shards), dW bitwise our NT
    GEMM on the gathered, dequantized column-wise copy; both copies' gathers exact."""
    if route == "dequantized":
        monkeypatch.setattr(gemm, "MX_A_MAX_COLUMNS", 0)
    P, r = world.size, world.rank
    src = [arr("mxnnt_dy", p, (m, n)) for p in range(P)]
    rows = [quantize_pair(s, 1) for s in src]
    cols = [quantize_pair(s, 0) for s in src]
    w_mx, w = quantized("mxnnt_w", 0, (n, k), axis=0, scale=0.1)
    x_mx, x = quantized("mxnnt_x", r, (P * m, k), axis=0)
    op = AllGatherMatmulNNNT(world, m, n, k, movers=None if P == 1 else movers)
    assert op.keeps_mx == (route == "kept" and gemm.arch_path() == "wgmma")
    kept = poisoned((P * m, n), bfloat16)
    dx, dw = op(rows[r][0], cols[r][0], w_mx, x_mx, dx=poisoned((P * m, k), bfloat16),
                dw=poisoned((n, k), bfloat16), gathered=kept)
    rows_mx = mx.DeviceMX(*(cupy.concatenate([getattr(q[0], f) for q in rows]) for f in ("data", "scales")), 1)
    want_dx = gemm.matmul(rows_mx, w_mx, "NN", tile_n=op.tile_n)
    if not op.keeps_mx:
        bf16_dx = AllGatherMatmul(world, m, n, k, layout="NN")(cupy.asarray(rows[r][1]), cupy.asarray(w))
        world.synchronize()
        np.testing.assert_array_equal(bits(bf16_dx), bits(want_dx))
    full_cols = np.concatenate([c[1] for c in cols])
    want_dw = wgrad_oracle(op, cupy.asarray(full_cols), cupy.asarray(x))
    world.synchronize()
    np.testing.assert_array_equal(bits(kept), np.concatenate([q[1] for q in rows]).view(np.uint16))
    np.testing.assert_array_equal(bits(op._scratch[1]), full_cols.view(np.uint16))
    np.testing.assert_array_equal(bits(dx), bits(want_dx))
    np.testing.assert_array_equal(bits(dw), bits(want_dw))
    assert rel_error(cupy.asnumpy(dw), f64(full_cols).T @ f64(x)) < TOL
    dx2, dw2 = op(rows[r][0], cols[r][0], cupy.asarray(w), cupy.asarray(x))  # bf16 W and X, new outputs
    world.synchronize()
    np.testing.assert_array_equal(bits(dx2), bits(dx))
    np.testing.assert_array_equal(bits(dw2), bits(dw))


def wgrad_oracle(op, dy_cols, x):
    """AG+NN(+NT)'s dW on our plain NT GEMM: op's stream-K split (sm_cap = its builders), or whole tiles."""
    if op.stream_k is not None:
        return gemm.matmul(dy_cols, x, "NT", sm_cap=op.builders, stream_k=True)
    return gemm.matmul(dy_cols, x, "NT", tile_n=256)


@pytest.mark.parametrize("shape", ["tail", "waves"])
def test_ag_nn_nt_stream_k_wgrad_is_the_plain_gemms(world, shape, monkeypatch):
    """AG+NN(+NT) with its wgrad in stream-K (forced through gemm.choose_stream_k): dW bitwise
    kosmos.matmul's stream-K on the gathered column-wise copy and the same builders, dX bitwise the
    whole-tile op's, into poisoned outputs, twice (the tiles' arrival counters return to 0), then
    (P > 1) once more with the last rank 1 s late, the gathered column-wise copy NaN-poisoned before
    each call: every K-range, not only a tile's first, waits for the whole gather. "tail": every
    wgrad tile cut into K-ranges; "waves": more than two waves (whole tiles first)."""
    if gemm.arch_path() != "wgmma":
        pytest.skip("stream-K is a Hopper path")
    P, r = world.size, world.rank
    if shape == "tail":
        m, n, k = 128 * -(-8 // P), 448, 320  # P * m >= 1024 tokens: 16+ slabs, two ranges of 8+
    else:
        m, n, k = 128 * -(-12 // P), 2304, 4096  # dW: 288 tiles of 128 x 256 over 24+ slabs
    src = arr("mxsk_dy", r, (m, n))
    (row_mx, _), (col_mx, _) = quantize_pair(src, 1), quantize_pair(src, 0)
    cols_full = np.concatenate([quantize_pair(arr("mxsk_dy", p, (m, n)), 0)[1] for p in range(P)])
    w_mx = quantized("mxsk_w", 0, (n, k), axis=0, scale=0.1)[0]
    x_mx, x = quantized("mxsk_x", r, (P * m, k), axis=0)
    monkeypatch.setattr(gemm, "choose_tile_n", lambda tiles, ctas: 256)  # stream-K is on 128 x 256 tiles
    monkeypatch.setattr(gemm, "choose_stream_k", lambda tiles, ctas, k_slabs: False)
    whole = AllGatherMatmulNNNT(world, m, n, k)
    dx_whole = whole(row_mx, col_mx, w_mx, x_mx)[0]
    monkeypatch.setattr(gemm, "choose_stream_k", lambda tiles, ctas, k_slabs: True)
    op = AllGatherMatmulNNNT(world, m, n, k)
    assert whole.stream_k is None and op.stream_k is not None, op.describe()
    assert (op.stream_k.full == 0) == (shape == "tail"), op.describe()
    want_dw = gemm.matmul(cupy.asarray(cols_full), cupy.asarray(x), "NT", sm_cap=op.builders, stream_k=True)
    for late in (False, False, P > 1):
        if 1 in op._scratch:  # the gathered column-wise copy NaN: a K-range read before its rows arrive shows
            op._scratch[1].view(np.uint8).fill(0xFF)
        world.synchronize()
        world.barrier()
        if late and r == P - 1:
            time.sleep(1.0)
        dx, dw = op(row_mx, col_mx, w_mx, x_mx, dx=poisoned((P * m, k), bfloat16), dw=poisoned((n, k), bfloat16))
        world.synchronize()
        np.testing.assert_array_equal(bits(dw), bits(want_dw), err_msg=f"late rank: {late}")
        np.testing.assert_array_equal(bits(dx), bits(dx_whole), err_msg=f"late rank: {late}")
    assert rel_error(cupy.asnumpy(dw), f64(cols_full).T @ f64(x)) < TOL


@pytest.mark.parametrize("width", [192, 128])
def test_ag_nn_nt_on_every_tile_width(world, width, monkeypatch):
    """AG+NN(+NT) with its builders forced onto each Hopper tile width (gemm.choose_tile_n): dX and
    dW bitwise the 128 x 256 tile's (whole tiles: stream-K off), into NaN-poisoned outputs (320
    output columns: a partial last tile column in every width)."""
    if gemm.arch_path() != "wgmma":
        pytest.skip("the narrow tiles are Hopper-only")
    monkeypatch.setattr(gemm, "choose_stream_k", lambda tiles, ctas, k_slabs: False)
    m, n, k = 384, 448, 320
    P, r = world.size, world.rank
    src = arr("mxw_dy", r, (m, n))
    row_mx, col_mx = quantize_pair(src, 1)[0], quantize_pair(src, 0)[0]
    w_mx = quantized("mxw_w", 0, (n, k), axis=0, scale=0.1)[0]
    x_mx = quantized("mxw_x", r, (P * m, k), axis=0)[0]

    def run(tile_n):
        monkeypatch.setattr(gemm, "choose_tile_n", lambda tiles, ctas: tile_n)
        op = AllGatherMatmulNNNT(world, m, n, k)
        assert op.tile_n == tile_n
        dx, dw = op(row_mx, col_mx, w_mx, x_mx, dx=poisoned((P * m, k), bfloat16), dw=poisoned((n, k), bfloat16))
        world.synchronize()
        got = bits(dx), bits(dw)
        assert not any(((g & 0x7FFF) > 0x7F80).any() for g in got), f"NaN left in an output at tile_n={tile_n}"
        return got

    base = run(256)
    for name, got, want in zip(("dX", "dW"), run(width), base):
        np.testing.assert_array_equal(got, want, err_msg=f"{name} at tile_n={width}")


def quantize_pair(x, axis):
    """(x's MXFP8 copy on the GPU, its exact bf16 dequantization on the host)."""
    t = mx.quantize(x, axis=axis)
    return mx.to_device(t), mx.dequantize(t).astype(bfloat16)


@pytest.mark.parametrize("m,n,k", SHAPES[:2])
def test_bulk_all_gather_mxfp8_gathers_column_blocks(world, m, n, k):
    """Bulk AG || NN with MXFP8 X (blocks along M, for the wgrad): X_full is the gathered MXFP8 (codes
    and scales bitwise the shards'), or, into a bf16 x_full, their exact dequantization; dX bitwise
    the bf16 op's on a bf16 dY, and kosmos.matmul's on an MXFP8 dY (the MXFP8-A builders where
    kosmos.matmul keeps A in MXFP8)."""
    P, r = world.size, world.rank
    shards = [quantized("mxbagx", p, (m, k), axis=0) for p in range(P)]  # for the wgrad: blocks along M
    dy = arr("mxbagdy", r, (P * m, n))
    w = arr("mxbagw", 0, (n, k), 0.1)
    op = BulkAllGatherMatmul(world, m, n, k, precision="mxfp8")
    x_full, dx = op(shards[r][0], cupy.asarray(dy), cupy.asarray(w), dx=poisoned((P * m, k), bfloat16),
                    x_full=poisoned((P * m, k), bfloat16))
    _, dx_bf16 = BulkAllGatherMatmul(world, m, n, k)(cupy.asarray(shards[r][1]), cupy.asarray(dy), cupy.asarray(w))
    world.synchronize()
    np.testing.assert_array_equal(bits(x_full), np.concatenate([s[1] for s in shards]).view(np.uint16))
    np.testing.assert_array_equal(bits(dx), bits(dx_bf16))
    dy_mx, w_mx = quantized("mxbagdy2", r, (P * m, n), axis=1)[0], quantized("mxbagw2", 0, (n, k), axis=0, scale=0.1)[0]
    x_mx, dx_mx = op(shards[r][0], dy_mx, w_mx, dx=poisoned((P * m, k), bfloat16))  # a new X_full, MXFP8
    want = gemm.matmul(dy_mx, w_mx, "NN", tile_n=op.tile_n)
    world.synchronize()
    assert isinstance(x_mx, mx.DeviceMX) and x_mx.axis == 0
    for f in ("data", "scales"):
        np.testing.assert_array_equal(cupy.asnumpy(getattr(x_mx, f)),
                                      np.concatenate([cupy.asnumpy(getattr(s[0], f)) for s in shards]))
    np.testing.assert_array_equal(bits(dx_mx), bits(want))
    assert op.dy_stays_mx == (gemm.arch_path() == "wgmma")  # these widths: kosmos.matmul's register path


@pytest.mark.parametrize("m,n,k", SHAPES[1:])
def test_reduce_scatters_take_mxfp8_local_operands(world, m, n, k):
    """The RS moves bf16 in both precisions: MXFP8 operands are dequantized, bitwise the bf16 op."""
    P, r = world.size, world.rank
    x_mx, x = quantized("mxrsx", r, (P * m, k), axis=1)
    w_mx, w = quantized("mxrsw", r, (n, k), axis=1, scale=0.1)
    rs = MatmulReduceScatter(world, m, n, k)
    got, want = rs(x_mx, w_mx), rs(cupy.asarray(x), cupy.asarray(w))
    dy_mx, dy = quantized("mxbrsdy", r, (P * m, n), axis=0)
    xf_mx, xf = quantized("mxbrsx", r, (P * m, k), axis=0)
    dxp = cupy.asarray(arr("mxbrsdxp", r, (P * m, k)))
    brs = BulkReduceScatterMatmul(world, m, n, k)
    _, dw = brs(dxp, dy_mx, xf_mx, dx=poisoned((m, k), bfloat16))
    _, dw_want = brs(dxp, cupy.asarray(dy), cupy.asarray(xf), dx=poisoned((m, k), bfloat16))
    world.synchronize()
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(dw), bits(dw_want))


def test_mxfp8_operands_are_checked_on_every_rank(world, monkeypatch):
    m, n, k = 128, 64, 64
    monkeypatch.setattr(gemm, "MX_A_MAX_COLUMNS", 0)  # a plan that gathers into bf16 refuses an MXFP8 keep
    op = AllGatherMatmul(world, m, n, k, precision="mxfp8")
    keep = mx.empty_mx(world.size * m, k, 1)
    with pytest.raises(TypeError, match="bf16"):
        op(quantized("mxbad0", world.rank, (m, k), axis=1)[0], cupy.asarray(arr("mxbadw0", 0, (n, k))), gathered=keep)
    monkeypatch.undo()
    op = AllGatherMatmul(world, m, n, k, precision="mxfp8")
    x_cols, _ = quantized("mxbad", world.rank, (m, k), axis=0)
    w = cupy.asarray(arr("mxbadw", 0, (n, k)))
    with pytest.raises(ValueError, match="blocks along its rows"):
        op(x_cols, w)  # blocks along the wrong axis for X W^T
    with pytest.raises(TypeError, match="DeviceMX"):
        op(cupy.asarray(arr("mxbadx", world.rank, (m, k))), w)  # bf16 into an mxfp8 plan
    with pytest.raises(ValueError, match="precision"):
        AllGatherMatmul(world, m, n, k, precision="fp8")
    nnt = AllGatherMatmulNNNT(world, m, n, k)
    with pytest.raises(ValueError, match="blocks along its columns"):
        nnt(x_rows_of(world, m, n), x_rows_of(world, m, n), w, cupy.asarray(arr("mxbadx2", 0, (world.size * m, k))))
    x_rows, _ = quantized("mxbad", world.rank, (m, k), axis=1)
    out = op(x_rows, w)  # the plans still work after the refusals
    nnt(x_rows_of(world, m, n), quantized("mxbad3", world.rank, (m, n), axis=0)[0], cupy.asarray(arr("mxbadw2", 0, (n, k))),
        cupy.asarray(arr("mxbadx2", 0, (world.size * m, k))))
    world.synchronize()
    assert not cupy.isnan(out.astype(cupy.float32)).any()


def x_rows_of(world, m, n):
    return quantized("mxbad2", world.rank, (m, n), axis=1)[0]


def test_mxfp8_gathers_with_a_late_rank(world):
    """The last rank starts its calls 1.5 s after the others: AG+TN (one mover) and AG+NN(+NT) on
    the MXFP8 path (kept where kosmos.matmul keeps A in MXFP8) wait on the device, and give the bits
    of kosmos.matmul on the gathered operand (AG+TN) and of an on-time call (AG+NN(+NT))."""
    P, r = world.size, world.rank
    m, n, k = 256, 192, 320
    shards = [quantized("mxlate", p, (m, k), axis=1) for p in range(P)]
    w_mx = quantized("mxlatew", 0, (n, k), axis=1, scale=0.1)[0]
    ag = AllGatherMatmul(world, m, n, k, precision="mxfp8", movers=None if P == 1 else 1)
    full_mx = mx.DeviceMX(*(cupy.concatenate([getattr(s[0], f) for s in shards]) for f in ("data", "scales")), 1)
    want = gemm.matmul(full_mx, w_mx, "TN", tile_n=ag.tile_n)
    src = arr("mxlatedy", r, (m, n))
    rows_mx, cols_mx = quantize_pair(src, 1)[0], quantize_pair(src, 0)[0]
    wn = quantized("mxlatewn", 0, (n, k), axis=0, scale=0.1)[0]
    xn = quantized("mxlatex", r, (P * m, k), axis=0)[0]
    nnt = AllGatherMatmulNNNT(world, m, n, k)
    dx0, dw0 = nnt(rows_mx, cols_mx, wn, xn)
    world.synchronize()
    world.barrier()
    if r == P - 1:
        time.sleep(1.5)
    y = ag(shards[r][0], w_mx, poisoned(ag.out_shape, bfloat16))
    dx, dw = nnt(rows_mx, cols_mx, wn, xn, dx=poisoned((P * m, k), bfloat16), dw=poisoned((n, k), bfloat16))
    world.synchronize()
    np.testing.assert_array_equal(bits(y), bits(want))
    np.testing.assert_array_equal(bits(dx), bits(dx0))
    np.testing.assert_array_equal(bits(dw), bits(dw0))
