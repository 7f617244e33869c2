"""GPU tests of the ping-pong tile (tile_m=64: 64 x 256 tiles, each consumer warpgroup owns one and
the two take turns on the tensor cores; hipsrc/kosmos/gemm/builder_wgmma.h).

Its exact oracle is the cooperative 128 x 256 tile: a 64-row tile runs the same m64n256k16 wgmma
sequence over the same 64-deep slabs for each of its rows, so every output must be bitwise the
128-row tile's (the epilogues too: they see the same fp32 accumulators). Each case also checks
against float64 (relative Frobenius error, bf16 1e-2, fp32 1e-4), with NaN-poisoned outputs,
bitwise reruns, and grids small enough that each CTA's two warpgroups hand the turn over many times.
"""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
pytest.importorskip("ml_dtypes")

from kosmos import gemm  # noqa: E402

from .test_gemm import BF16, TOL, nan_buffer, operands, rand_bf16, reference, rel_err  # noqa: E402
from .test_grouped import EDGE, run_case  # noqa: E402

if gemm.arch_path() != "wgmma":
    pytest.skip("the ping-pong tile is Hopper-only", allow_module_level=True)


def bits(x):
    return x.view(cupy.uint16 if x.dtype == BF16 else cupy.uint32)


# Odd M (one row, one tile row and a bit, many tile rows); caps of 1 (one CTA: every tile through
# one pair of warpgroups), 3 and 7, and the whole GPU.
CASES = [("TN", 1, 256, 192, None), ("TN", 65, 320, 448, 1), ("TN", 1000, 1024, 2048, 7),
         ("NN", 129, 448, 384, 3), ("NN", 2047, 640, 1536, None), ("NT", 63, 192, 320, 1),
         ("NT", 1999, 384, 512, 3)]


@pytest.mark.parametrize("out_kind", ["bf16", "f32"])
@pytest.mark.parametrize("layout,m,n,k,cap", CASES)
def test_ping_pong_matches_the_cooperative_tile_bitwise(layout, m, n, k, cap, out_kind):
    rng = np.random.default_rng([m, n, k, len(out_kind)])
    sa, sb = operands(layout, m, n, k)
    a_h, b_h = rand_bf16(rng, sa), rand_bf16(rng, sb)
    a, b = cupy.asarray(a_h), cupy.asarray(b_h)
    ref = reference(layout, a_h, b_h)
    dt = BF16 if out_kind == "bf16" else np.dtype(np.float32)
    whole, out = nan_buffer(ref.shape, dt)
    gemm.matmul(a, b, layout, out=out, sm_cap=cap, tile_n=256, tile_m=64)
    err = rel_err(out.get().astype(np.float64), ref)
    assert err < TOL[out_kind], f"{layout} M={m} N={n} K={k}: relative error {err:.3e}"
    assert np.isnan(whole[ref.shape[0]:].get().astype(np.float32)).all(), "rows past the output were written"
    coop = gemm.matmul(a, b, layout, out_dtype=dt, sm_cap=cap, tile_n=256, tile_m=128)
    assert (bits(out) == bits(coop)).all(), "not bitwise the 128-row tile's"
    again = gemm.matmul(a, b, layout, out_dtype=dt, sm_cap=None if cap else 2, tile_m=64)
    assert (bits(again) == bits(out)).all(), "rerun (another cap) differs"


@pytest.mark.parametrize("m,f,k,cap", [(1, 192, 256, None), (1031, 512, 1024, 3), (4099, 768, 512, None)])
def test_ping_pong_swiglu(m, f, k, cap):
    rng = np.random.default_rng([m, f, k])
    x_h, w_h = rand_bf16(rng, (m, k)), rand_bf16(rng, (2 * f, k))
    x, w = cupy.asarray(x_h), cupy.asarray(w_h)
    whole, out = nan_buffer((m, f), BF16)
    kept_whole, kept = nan_buffer((m, 2 * f), BF16)
    gemm.matmul(x, w, "TN", out=out, sm_cap=cap, epilogue="swiglu", gate_up=kept, tile_m=64)
    assert rel_err(out.get().astype(np.float64), reference("TN", x_h, w_h, "swiglu")) < TOL["bf16"]
    assert np.isnan(whole[m:].get().astype(np.float32)).all()
    assert np.isnan(kept_whole[m:].get().astype(np.float32)).all()
    coop_kept = cupy.empty_like(kept)
    coop = gemm.matmul(x, w, "TN", sm_cap=cap, epilogue="swiglu", gate_up=coop_kept, tile_m=128)
    assert (bits(out) == bits(coop)).all() and (bits(kept) == bits(coop_kept)).all()
    assert (bits(gemm.matmul(x, w, "TN", epilogue="swiglu", tile_m=64)) == bits(out)).all(), "rerun differs"


@pytest.mark.parametrize("m,f,n,cap", [(200, 192, 320, None), (1031, 512, 1024, 7)])
def test_ping_pong_swiglu_backward(m, f, n, cap):
    from kosmos.moe.reference import swiglu_backward

    rng = np.random.default_rng([m, f, n, 1])
    dy_h, w2_h, pre_h = rand_bf16(rng, (m, n)), rand_bf16(rng, (n, f)), rand_bf16(rng, (m, 2 * f))
    dy, w2, pre = cupy.asarray(dy_h), cupy.asarray(w2_h), cupy.asarray(pre_h)
    whole, out = nan_buffer((m, 2 * f), BF16)
    gemm.matmul(dy, w2, "NN", out=out, sm_cap=cap, epilogue="swiglu_backward", gate_up=pre, tile_m=64)
    ref = swiglu_backward(np, pre_h.astype(np.float64), reference("NN", dy_h, w2_h))
    assert rel_err(out.get().astype(np.float64), ref) < TOL["bf16"]
    assert np.isnan(whole[m:].get().astype(np.float32)).all()
    coop = gemm.matmul(dy, w2, "NN", sm_cap=cap, epilogue="swiglu_backward", gate_up=pre, tile_m=128)
    assert (bits(out) == bits(coop)).all()


@pytest.mark.parametrize("layout,m,n,k,splits", [("TN", 300, 320, 4096, 4), ("NT", 4099, 192, 320, 3)])
def test_ping_pong_split_k(layout, m, n, k, splits):
    """Split-K's fp32 partials from 64-row tiles: the same K-ranges, so the same bits."""
    rng = np.random.default_rng([m, splits])
    sa, sb = operands(layout, m, n, k)
    a_h, b_h = rand_bf16(rng, sa), rand_bf16(rng, sb)
    a, b = cupy.asarray(a_h), cupy.asarray(b_h)
    whole, out = nan_buffer((n, k) if layout == "NT" else (m, n), np.float32)
    gemm.matmul(a, b, layout, out=out, split_k=splits, sm_cap=5, tile_m=64)
    assert rel_err(out.get().astype(np.float64), reference(layout, a_h, b_h)) < TOL["f32"]
    assert np.isnan(whole[out.shape[0]:].get()).all()
    coop = gemm.matmul(a, b, layout, out_dtype=np.float32, split_k=splits, tile_m=128)
    assert (bits(out) == bits(coop)).all()


@pytest.mark.parametrize("tile_m", [128, 64])
@pytest.mark.parametrize("burst", [1, 3])
def test_the_builder_leaves_and_reenters_between_tiles(tile_m, burst):
    """kosmos_gemm_tn_bf16_bursts: the claim stops the builder after every `burst` tiles and the CTA
    calls it again (the persistent ring, and ping-pong's turn, survive each exit and re-entry)."""
    from kosmos.runtime import PersistentLaunch

    m, n, k = 1537, 768, 640
    rng = np.random.default_rng([burst, tile_m])
    a, b = cupy.asarray(rand_bf16(rng, (m, k))), cupy.asarray(rand_bf16(rng, (n, k)))
    plan = gemm.get_plan(gemm.gemm_shape("TN", (m, k), (n, k)), BF16, 5, tile_n=256, tile_m=tile_m)
    name = "kosmos_gemm_tn_bf16_bursts" + gemm.tile_suffix(256, tile_m)
    launch = PersistentLaunch.checked(gemm._module().get_function(name), plan.grid, gemm.block_threads(),
                                      gemm.shared_mem_bytes())
    want = gemm.matmul(a, b, "TN", tile_n=256)
    for _ in range(2):  # the kernel's last CTA resets the queue: a second launch must work too
        whole, out = nan_buffer((m, n), BF16)
        launch(plan.args(a, b, out) + (np.int32(burst),))
        assert (bits(out) == bits(want)).all(), "not the plain GEMM's bits"
        assert np.isnan(whole[m:].get().astype(np.float32)).all()


# Grouped: counts around the 64-row tile (63, 64, 65) as well as the 128-row one's edges.
EDGE64 = EDGE + [63, 64, 65]


@pytest.mark.parametrize("layout", ["TN", "NN", "NT"])
def test_grouped_ping_pong_edge_counts(layout):
    run_case(layout, EDGE64, 320, 192, tile_m=64)
    run_case(layout, EDGE64, 320, 192, tile_m=64, cap=1, out_kind="f32" if layout == "NT" else "bf16")
    run_case(layout, [0, 0, 2051, 0], 576, 448, tile_m=64, cap=5)


def test_grouped_ping_pong_swiglu_both_ways():
    run_case("TN", [5, 260, 0, 129, 64], 2 * 192, 256, epilogue="swiglu", tile_m=64)
    run_case("TN", [0, 3000, 1], 2 * 512, 512, epilogue="swiglu", tile_m=64, cap=7)
    run_case("NN", [5, 260, 0, 129, 65], 320, 192, epilogue="swiglu_backward", tile_m=64)
    run_case("NN", [0, 0, 2051, 0], 576, 448, epilogue="swiglu_backward", tile_m=64, cap=5)


def test_grouped_ping_pong_wgrad_ragged_reduction_with_inf_past_the_rows():
    run_case("NT", [65, 0, 300, 1, 63], 384, 256, out_kind="f32", rows_extra=90, tile_m=64)
