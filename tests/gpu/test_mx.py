"""GPU test of kosmos.mx.quantize_both: both MXFP8 copies of a bf16 matrix, bit for bit against the
NumPy reference (kosmos.mx.quantize on each axis), with tiny, huge, NaN, Inf and all-zero blocks."""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import mx  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.shapes import PaperShape  # noqa: E402

from .conftest import poisoned  # noqa: E402


@pytest.mark.parametrize("shape", [(32, 32), (96, 160), (64, 352), (512, 1024)])
def test_both_orientations_match_the_reference(shape):
    rng = np.random.default_rng(shape)
    rows, cols = shape
    # magnitudes over bf16's whole range: the k = -127 clamp and subnormal inputs at the bottom
    mags = np.exp2(rng.uniform(-133, 126, size=(rows, 1))).astype(np.float32)
    x = (rng.standard_normal(shape).astype(np.float32) * mags).astype(bfloat16)
    x[0, 3] = np.nan
    x[rows // 2, cols - 1] = np.inf
    if rows > 32 and cols > 32:
        x[32:64, 32:64] = 0  # an all-zero block in both orientations
    row, col = mx.quantize_both(cupy.asarray(x))
    for got, axis in ((row, -1), (col, 0)):
        want = mx.quantize(x, axis=axis)
        assert (cupy.asnumpy(got.data) == want.data.view(np.uint8)).all(), axis
        assert (cupy.asnumpy(got.scales) == want.scales.view(np.uint8)).all(), axis
    again = mx.quantize_both(cupy.asarray(x))
    assert (cupy.asnumpy(again[0].data) == cupy.asnumpy(row.data)).all()
    # the column-wise copy stored transposed: the row-wise copy of x^T (the row-wise one unchanged)
    row_t, col_t = mx.quantize_both(cupy.asarray(x), transpose_columns=True)
    want = mx.quantize(np.ascontiguousarray(x.T), axis=-1)
    assert col_t.axis == 1 and col_t.shape == (cols, rows)
    assert (cupy.asnumpy(col_t.data) == want.data.view(np.uint8)).all()
    assert (cupy.asnumpy(col_t.scales) == want.scales.view(np.uint8)).all()
    assert (cupy.asnumpy(row_t.data) == cupy.asnumpy(row.data)).all()
    assert (cupy.asnumpy(row_t.scales) == cupy.asnumpy(row.scales)).all()


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="multiples of 32"):
        mx.quantize_both(cupy.zeros((32, 48), np.uint16).view(bfloat16))


@pytest.mark.parametrize("shape", [(64, 96), (512, 1024), (2080, 64)])
def test_device_dequantize_is_the_reference(shape):
    """kosmos.mx.dequantize_device on both copies of quantize_both, into a NaN-poisoned output: bit
    for bit dequantize(quantize(x, axis)).astype(bfloat16), every code and scale range covered by
    the data. (2080 rows: more rows than CTAs, so CTAs take two rows and the last ones none.)"""
    rng = np.random.default_rng(sum(shape))
    mags = np.exp2(rng.uniform(-133, 126, size=(shape[0], 1))).astype(np.float32)
    x = (rng.standard_normal(shape).astype(np.float32) * mags).astype(bfloat16)
    x[1, 5] = np.nan
    for got, axis in zip(mx.quantize_both(cupy.asarray(x)), (-1, 0)):
        with np.errstate(over="ignore"):
            want = mx.dequantize(mx.quantize(x, axis=axis)).astype(bfloat16).view(np.uint16)
        out = cupy.asnumpy(mx.dequantize_device(got, out=poisoned(shape, bfloat16))).view(np.uint16)
        nan = (want & 0x7FFF) > 0x7F80
        assert (((out & 0x7FFF) > 0x7F80) == nan).all(), axis
        assert (out[~nan] == want[~nan]).all(), axis


def test_device_dequantize_every_code_and_scale():
    """All 65,536 (E4M3 code, E8M0 scale) pairs through the kernel's vector path (on NVIDIA sm_89+
    the hardware conversions; on gfx950 v_cvt_scalef32_pk_bf16_fp8 for scale codes 10-246, the
    integer form outside): bit for bit the reference, NaN where it is NaN. Row r holds every code
    under scale r; its column-block twin (the transpose) reads 16 scales per vector."""
    codes = np.tile(np.arange(256, dtype=np.uint8), (256, 1))                 # [scale, code]
    row = mx.DeviceMX(cupy.asarray(codes), cupy.asarray(np.repeat(np.arange(256, dtype=np.uint8)[:, None], 8, 1)), 1)
    col = mx.DeviceMX(cupy.asarray(codes.T.copy()), cupy.asarray(np.repeat(np.arange(256, dtype=np.uint8)[None], 8, 0)), 0)
    for t in (row, col):
        host = mx.MXTensor(cupy.asnumpy(t.data).view(mx.float8_e4m3), cupy.asnumpy(t.scales).view(mx.float8_e8m0),
                           t.axis)
        with np.errstate(over="ignore"):
            want = mx.dequantize(host).astype(bfloat16).view(np.uint16)
        out = poisoned(t.data.shape, bfloat16)
        got = cupy.asnumpy(mx.dequantize_device(t, out=out)).view(np.uint16)
        nan = (want & 0x7FFF) > 0x7F80
        assert (((got & 0x7FFF) > 0x7F80) == nan).all(), t.axis
        bad = np.argwhere((got != want) & ~nan)
        assert bad.size == 0, f"axis {t.axis}: {len(bad)} pairs differ, first {bad[:3].tolist()}"


def _mx_operands(layout, m, n, k, seed, spread=0.0):
    """(DeviceMX, its reference dequantization in bf16) for a and b of `layout`, each quantized along
    its contracting axis; `spread`: log2 range of per-row magnitudes (0: unit normal data)."""
    from kosmos import gemm

    rng = np.random.default_rng(seed)
    a_shape, b_shape, _ = PaperShape("", "", m, n, k, layout).operand_shapes()
    ops = []
    for i, shape in enumerate((a_shape, b_shape)):
        mags = np.exp2(rng.uniform(-spread, spread, size=(shape[0], 1))) if spread else 1.0
        x = ((rng.standard_normal(shape) + 0.05) * mags).astype(bfloat16)
        t = mx.quantize(x, axis=gemm.contracting_axis(layout, i))
        ops.append((mx.to_device(t), mx.dequantize(t).astype(bfloat16)))
    return ops


@pytest.mark.parametrize("shape", [(192, 352), (96, 4128), (2080, 96), (8224, 64)])
@pytest.mark.parametrize("axis", [1, 0])
def test_kperm_operand_is_permute_k(shape, axis):
    """kosmos.mx.kperm_operand (B of the MXFP8-A GEMM) bit for bit permute_k of the reference
    dequantization, from an MXFP8 copy (blocks along `axis`) and from bf16: reductions of whole
    slabs and of a half slab at the end (zero padding), long and short rows, a NaN block, scales
    over bf16's whole range."""
    rng = np.random.default_rng([*shape, axis])
    mags = np.exp2(rng.uniform(-133, 126, size=(shape[0], 1))).astype(np.float32)
    x = (rng.standard_normal(shape).astype(np.float32) * mags).astype(bfloat16)
    x[3, 5] = np.nan
    t = mx.quantize(x, axis=axis)
    with np.errstate(over="ignore"):
        want = mx.permute_k(mx.dequantize(t).astype(bfloat16), axis).view(np.uint16)
    for source, ref in ((mx.to_device(t), want), (cupy.asarray(x), mx.permute_k(x, axis).view(np.uint16))):
        got = cupy.asnumpy(mx.kperm_operand(source, axis=axis)).view(np.uint16)
        assert got.shape == ref.shape
        nan = (ref & 0x7FFF) > 0x7F80
        assert (((got & 0x7FFF) > 0x7F80) == nan).all()
        assert (got[~nan] == ref[~nan]).all(), type(source).__name__


def _reference(layout, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return {"TN": lambda: a64 @ b64.T, "NN": lambda: a64 @ b64, "NT": lambda: a64.T @ b64}[layout]()


def _bits(x):
    return cupy.asnumpy(x).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def test_matmul_on_mxfp8_operands_nt():
    """NT (A MN-major): both operands dequantized first; bitwise the bf16 GEMM of the reference-
    dequantized operands, and within bf16 rounding of float64."""
    from kosmos import gemm
    from kosmos.reference import rel_error

    m, n, k = 320, 192, 320  # odd tile counts (NT's output rows must be multiples of 64)
    (a_mx, a), (b_mx, b) = _mx_operands("NT", m, n, k, seed=2)
    got = gemm.matmul(a_mx, b_mx, "NT", out=poisoned((m, n), bfloat16))
    want = gemm.matmul(cupy.asarray(a), cupy.asarray(b), "NT")
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert rel_error(cupy.asnumpy(got), _reference("NT", a, b)) < 1e-2
    with pytest.raises(ValueError, match="contracting axis"):
        wrong = mx.to_device(mx.quantize(a, axis=1 - gemm.contracting_axis("NT", 0)))
        gemm.matmul(wrong, b_mx, "NT")


@pytest.mark.parametrize("m,n,k", [(320, 192, 320), (2048, 1536, 512), (4096, 256, 2048), (4096, 192, 1344)])
def test_wgrad_as_tn_on_transposed_column_copies(m, n, k, monkeypatch):
    """dW = dY^T X from quantize_both(..., transpose_columns=True)'s copies of dY [m, n] and X [m, k]
    as matmul(dy_t, x_t, "TN"), the register path forced (an MXFP8 A in the mainloop). The last
    two shapes (X^T 7-8x taller than dY^T; the last with tiles cut at both edges) run as
    (x_t dy_t^T)^T (gemm.mx_swap_pays). Bitwise our bf16
    whole-tile TN GEMM on the permuted reference-dequantized operands (transposed where swapped),
    twice; a tile width named never swaps; float64 of dY^T X on the dequantized operands within
    bf16 rounding, as is the NT GEMM on the untransposed column copies."""
    from kosmos import gemm
    from kosmos.reference import rel_error

    if gemm.arch_path() != "wgmma":
        pytest.skip("the MXFP8-A mainloop is Hopper's")
    monkeypatch.setattr(gemm, "MX_A_MAX_COLUMNS", 1 << 30)
    rng = np.random.default_rng([m, n, k])
    dy, x = ((rng.standard_normal(shape) + 0.05).astype(bfloat16) for shape in ((m, n), (m, k)))
    (_, dy_t), (_, x_t) = (mx.quantize_both(cupy.asarray(v), transpose_columns=True) for v in (dy, x))
    a, b = (mx.dequantize(mx.quantize(np.ascontiguousarray(v.T), axis=-1)).astype(bfloat16) for v in (dy, x))
    ap, bp = (cupy.asarray(mx.permute_k(v, 1)) for v in (a, b))
    swapped = gemm.mx_swap_pays(gemm.gemm_shape("TN", a.shape, b.shape), 2)
    assert swapped == (n < k // 4)
    got = gemm.matmul(dy_t, x_t, "TN", out=poisoned((n, k), bfloat16))
    again = gemm.matmul(dy_t, x_t, "TN", out=poisoned((n, k), bfloat16))
    want = gemm.matmul(bp, ap, "TN", tile_n=256).T if swapped else gemm.matmul(ap, bp, "TN", tile_n=256)
    np.testing.assert_array_equal(_bits(got), _bits(cupy.ascontiguousarray(want)))
    np.testing.assert_array_equal(_bits(again), _bits(got))
    f32 = gemm.matmul(dy_t, x_t, "TN", out=poisoned((n, k), np.float32))  # the 4-byte transpose where swapped
    want32 = gemm.matmul(bp, ap, "TN", out_dtype=np.float32, tile_n=256).T if swapped else \
        gemm.matmul(ap, bp, "TN", out_dtype=np.float32, tile_n=256)
    np.testing.assert_array_equal(_bits(f32), _bits(cupy.ascontiguousarray(want32)))
    named = gemm.matmul(dy_t, x_t, "TN", out=poisoned((n, k), bfloat16), tile_n=256)
    np.testing.assert_array_equal(_bits(named), _bits(gemm.matmul(ap, bp, "TN", tile_n=256)))
    ref = _reference("TN", a, b)
    assert rel_error(cupy.asnumpy(got), ref) < 1e-2
    assert rel_error(cupy.asnumpy(named), ref) < 1e-2
    (_, dy_c), (_, x_c) = (mx.quantize_both(cupy.asarray(v)) for v in (dy, x))
    assert rel_error(cupy.asnumpy(gemm.matmul(dy_c, x_c, "NT")), ref) < 1e-2


# (m, n, k): odd tile counts with rows ending inside a tile; more tiles than CTAs (several a CTA);
# a deep reduction (many slabs: both fragment sets of the mainloop, scales a slab ahead)
MX_A_SHAPES = [(352, 192, 320), (4096, 2304, 512), (544, 320, 4096)]


@pytest.mark.parametrize("m,n,k", MX_A_SHAPES)
@pytest.mark.parametrize("layout", ["TN", "NN"])
def test_matmul_mx_a_in_the_mainloop(layout, m, n, k, monkeypatch):
    """TN and NN with an MXFP8 A on Hopper: A dequantized in the consumers' registers, B permuted per
    slab. Bitwise our bf16 GEMM on the permuted, reference-dequantized operands (the same wgmma
    steps on the same values) for every tile width, twice (reproducible); float64 within bf16
    rounding; B given as bf16 gives the same bits as B given as MXFP8."""
    from kosmos import gemm
    from kosmos.reference import rel_error

    if gemm.arch_path() != "wgmma":
        pytest.skip("the MXFP8-A mainloop is Hopper's (elsewhere A is dequantized first)")
    (a_mx, a), (b_mx, b) = _mx_operands(layout, m, n, k, seed=m + n + k, spread=24)
    out_shape = (m, n)
    # matmul picks the dequantize-first path for wide GEMMs: the automatic choice first, then the
    # register path forced on every shape
    auto = gemm.matmul(a_mx, b_mx, layout, out=poisoned(out_shape, bfloat16), tile_n=256)
    if n > gemm.mx_a_max_columns():
        np.testing.assert_array_equal(_bits(auto), _bits(gemm.matmul(cupy.asarray(a), cupy.asarray(b), layout,
                                                                      tile_n=256)))
    monkeypatch.setattr(gemm, "MX_A_MAX_COLUMNS", 1 << 30)
    ap = cupy.asarray(mx.permute_k(a, 1))
    bp = cupy.asarray(mx.permute_k(b, gemm.contracting_axis(layout, 1)))
    ref = _reference(layout, a, b)
    for tile_n in (256, 192, 128):
        got = gemm.matmul(a_mx, b_mx, layout, out=poisoned(out_shape, bfloat16), tile_n=tile_n)
        again = gemm.matmul(a_mx, b_mx, layout, out=poisoned(out_shape, bfloat16), tile_n=tile_n)
        want = gemm.matmul(ap, bp, layout, tile_n=tile_n)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"tile_n={tile_n}")
        np.testing.assert_array_equal(_bits(again), _bits(got))
        assert rel_error(cupy.asnumpy(got), ref) < 1e-2, tile_n
    f32 = gemm.matmul(a_mx, cupy.asarray(b), layout, out_dtype=np.float32, tile_n=256)  # B bf16, fp32 out
    np.testing.assert_array_equal(_bits(f32), _bits(gemm.matmul(ap, bp, layout, out_dtype=np.float32, tile_n=256)))
    auto = gemm.matmul(a_mx, b_mx, layout)  # the automatic tile choice
    assert rel_error(cupy.asnumpy(auto), ref) < 1e-2
    with pytest.raises(ValueError, match="contracting axis"):
        gemm.matmul(mx.to_device(mx.quantize(a, axis=0)), b_mx, layout)


@pytest.mark.parametrize("layout", ["TN", "NN"])
def test_matmul_mx_a_nan_codes_and_scales(layout):
    """A NaN block (NaN scale, as quantize writes it) and a NaN code under a finite scale (a foreign
    producer's): exactly the rows holding one are NaN, the others bitwise the oracle."""
    from kosmos import gemm

    if gemm.arch_path() != "wgmma":
        pytest.skip("the MXFP8-A mainloop is Hopper's")
    m, n, k = 256, 256, 256
    (a_mx, a), (b_mx, b) = _mx_operands(layout, m, n, k, seed=7)
    data, scales = cupy.asnumpy(a_mx.data), cupy.asnumpy(a_mx.scales)
    data[5, 40] = 0x7F        # a NaN code, scale finite
    data[130, 200] = 0xFF     # its negative twin
    scales[77, 3] = 0xFF      # a NaN scale over finite codes
    a_bad = mx.DeviceMX(cupy.asarray(data), cupy.asarray(scales), 1)
    got = cupy.asnumpy(gemm.matmul(a_bad, b_mx, layout, out=poisoned((m, n), bfloat16), tile_n=256))
    nan_rows = np.isnan(got.astype(np.float32)).any(axis=1)
    assert sorted(np.flatnonzero(nan_rows)) == [5, 77, 130]
    assert np.isnan(got[[5, 77, 130]].astype(np.float32)).all()
    want = cupy.asnumpy(gemm.matmul(cupy.asarray(mx.permute_k(a, 1)),
                                    cupy.asarray(mx.permute_k(b, gemm.contracting_axis(layout, 1))), layout, tile_n=256))
    np.testing.assert_array_equal(got[~nan_rows].view(np.uint16), want[~nan_rows].view(np.uint16))


def test_register_dequant_every_code_and_scale():
    """The mainloop's conversion (e4m3x4_to_bf16x4_scaled) on all 65,536 (code, scale) pairs: bit for
    bit the reference for every non-NaN code (bf16 subnormals, overflow to Inf and the NaN scale
    included); e4m3x4_nan_seen flags exactly the words with a NaN code (whose rows the mainloop makes NaN)."""
    from kosmos import gemm
    from kosmos.runtime.module import load_module

    if gemm.arch_path() != "wgmma":
        pytest.skip("the register conversion is Hopper's (bf16x2 multiplies)")
    codes = np.tile(np.arange(256, dtype=np.uint8), 256)               # pair i: code i % 256, scale i // 256
    scales = np.repeat(np.arange(256, dtype=np.uint8), 256)
    words = cupy.asarray(codes.view(np.uint32))
    word_scales = cupy.asarray(scales[::4].copy())
    out = cupy.full(2 * words.size, 0xFFFFFFFF, dtype=np.uint32)
    one = cupy.full(2 * words.size, 0xFFFFFFFF, dtype=np.uint32)
    nan = cupy.full(words.size, 0xFFFFFFFF, dtype=np.uint32)
    load_module("mx.hip").get_function("kosmos_mx_regs_dequant")(
        (64,), (256,), (words, word_scales, np.int64(words.size), out, one, nan))
    got = cupy.asnumpy(out).view(np.uint16)  # element i's bf16, in code order
    got_one = cupy.asnumpy(one).view(np.uint16)
    ref = mx.MXTensor(codes.reshape(-1, 32).view(mx.float8_e4m3), scales[::32].reshape(-1, 1).view(mx.float8_e8m0), 1)
    with np.errstate(over="ignore"):
        want = mx.dequantize(ref).astype(bfloat16).view(np.uint16).reshape(-1)
    nan_code = (codes & 0x7F) == 0x7F
    want_nan = (want & 0x7FFF) > 0x7F80
    ok = ~nan_code
    assert (((got[ok] & 0x7FFF) > 0x7F80) == want_nan[ok]).all()
    bad = np.flatnonzero(ok & ~want_nan & (got != want))
    assert bad.size == 0, f"{bad.size} pairs differ, first (code, scale): {[(i % 256, i // 256) for i in bad[:4]]}"
    # the one-multiply form (scales up to 134, 2^7): the same bits as the two multiplies, NaN
    # codes included (both read them as the same finite value; the mainloop's watch makes them NaN)
    small = scales <= 134
    assert (got_one[~small] == 0xFFFF).all(), "the one-multiply form ran past its scales"
    bad = np.flatnonzero(small & (got_one != got))
    assert bad.size == 0, f"{bad.size} pairs differ by form, first (code, scale): {[(i % 256, i // 256) for i in bad[:4]]}"
    flags = cupy.asnumpy(nan)
    word_has_nan = nan_code.reshape(-1, 4).any(axis=1)
    assert ((flags == 1) == word_has_nan).all() and set(np.unique(flags)) <= {0, 1}


def scaled_operands(m, n, k, seed):
    """(A [m, k], B [n, k]) as (row-blocked MXFP8 on the GPU, float64 of its dequantization): normal
    values under block scales 2^-2 .. 2^2 apart, so a wrong lane, row, k-group or scale mapping moves
    elements by their own size."""
    rng = np.random.default_rng(seed)
    ops = []
    for rows in (m, n):
        x = (rng.standard_normal((rows, k)) * np.exp2(rng.integers(-2, 3, (rows, k // 32))).repeat(32, 1))
        t = mx.quantize(x.astype(np.float32), axis=1)
        ops.append((mx.to_device(t), mx.dequantize(t).astype(np.float64)))
    return ops


@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (300, 200, 512)])
def test_scaled_mfma_gemm(m, n, k):
    """gfx950's native MXFP8 GEMM (the fragment layout of hipsrc/kosmos/mx/mfma_scale.h, never run yet)
    against float64 of the dequantized operands, element by element against |A| |B|^T (fp32 sums,
    one bf16 rounding): blocks of comparable size (scales 2^-2 .. 2^2 apart) and odd shapes, so a
    wrong lane, row, k-group or scale mapping moves elements by their own size."""
    from kosmos.reference import rel_error

    if not mx.scaled_mfma_available():
        pytest.skip("CDNA4's block-scaled MFMA needs a gfx950 GPU")

    (a_mx, a), (b_mx, b) = scaled_operands(m, n, k, [m, n, k])
    got = cupy.asnumpy(mx.matmul_scaled_mfma(a_mx, b_mx, out=poisoned((m, n), bfloat16))).astype(np.float64)
    bound = 8e-3 * (np.abs(a) @ np.abs(b).T)
    assert (np.abs(got - a @ b.T) <= bound).all()
    assert rel_error(got, a @ b.T) < 1e-2


@pytest.mark.parametrize("m,n,k,out_dtype", [(128, 256, 64, "bf16"), (300, 520, 544, "bf16"), (260, 512, 1024, "bf16"),
                                             (1000, 700, 1056, "f32")])
def test_matmul_on_the_scaled_mfma_builder(m, n, k, out_dtype):
    """gfx950: kosmos.matmul of two MXFP8 operands (TN) runs the builder's block-scaled MFMA tiles
    (gemm/mfma_mx.h; never run yet): bitwise the standalone kosmos.matmul_scaled_mfma in bf16 (the
    same MFMAs, k in the same order), within the same element bound of float64 in both outputs;
    odd shapes (partial tiles, a partial last 64-slab: k = 544, 1056), several tiles a CTA; twice."""
    from kosmos import gemm

    if not mx.scaled_mfma_available():
        pytest.skip("CDNA4's block-scaled MFMA needs a gfx950 GPU")
    (a_mx, a), (b_mx, b) = scaled_operands(m, n, k, [m, n, k, 1])
    dt = bfloat16 if out_dtype == "bf16" else np.float32
    runs = [cupy.asnumpy(gemm.matmul(a_mx, b_mx, "TN", out=poisoned((m, n), dt))) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8))
    got = runs[0].astype(np.float64)
    bound = 8e-3 * (np.abs(a) @ np.abs(b).T)
    assert (np.abs(got - a @ b.T) <= bound).all()
    if out_dtype == "bf16" and k % 64 == 0:
        standalone = cupy.asnumpy(mx.matmul_scaled_mfma(a_mx, b_mx))
        np.testing.assert_array_equal(runs[0].view(np.uint16), standalone.view(np.uint16))


def test_scaled_mfma_gemm_is_refused_without_gfx950():
    if mx.scaled_mfma_available():
        pytest.skip("this GPU has the block-scaled MFMA")
    t = mx.to_device(mx.quantize(np.ones((64, 64), np.float32), axis=1))
    with pytest.raises(RuntimeError, match="gfx950"):
        mx.matmul_scaled_mfma(t, t)
