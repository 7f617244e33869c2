"""GPU test of kosmos.mx.quantize_both: both MXFP8 copies of a bf16 matrix, bit for bit against the
NumPy reference (kosmos.mx.quantize on each axis), with tiny, huge, NaN, Inf and all-zero blocks."""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import mx  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402

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
    the hardware conversions): bit for bit the reference, NaN where it is NaN. Row r holds every
    code under scale r; its column-block twin (the transpose) reads 16 scales per vector."""
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


@pytest.mark.parametrize("layout", ["TN", "NN", "NT"])
def test_matmul_on_mxfp8_operands(layout):
    """kosmos.matmul on DeviceMX operands (blocks along each one's contracting axis) is bitwise
    the bf16 GEMM of the reference-dequantized operands, and within bf16 rounding of float64."""
    from kosmos import gemm
    from kosmos.reference import rel_error

    # odd tile counts; M of TN/NN a multiple of 32 only (NT's output rows must be multiples of 64)
    m, n, k = (320 if layout == "NT" else 352), 192, 320
    rng = np.random.default_rng(len(layout))
    a_shape, b_shape, _ = gemm.PaperShape("", "", m, n, k, layout).operand_shapes()
    ops = []
    for i, shape in enumerate((a_shape, b_shape)):
        x = (rng.standard_normal(shape) + 0.05).astype(bfloat16)
        t = mx.quantize(x, axis=gemm.contracting_axis(layout, i))
        ops.append((mx.to_device(t), mx.dequantize(t).astype(bfloat16)))
    (a_mx, a), (b_mx, b) = ops
    out = poisoned((m, n), bfloat16)
    got = gemm.matmul(a_mx, b_mx, layout, out=out)
    want = gemm.matmul(cupy.asarray(a), cupy.asarray(b), layout)
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint16), cupy.asnumpy(want).view(np.uint16))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = {"TN": lambda: a64 @ b64.T, "NN": lambda: a64 @ b64, "NT": lambda: a64.T @ b64}[layout]()
    assert rel_error(cupy.asnumpy(got), ref) < 1e-2
    with pytest.raises(ValueError, match="contracting axis"):
        wrong = mx.to_device(mx.quantize(a, axis=1 - gemm.contracting_axis(layout, 0)))
        gemm.matmul(wrong, b_mx, layout)


@pytest.mark.parametrize("m,n,k", [(128, 128, 64), (300, 200, 512)])
def test_scaled_mfma_gemm(m, n, k):
    """gfx950's native MXFP8 GEMM (the fragment layout of hipsrc/kosmos/mx/mfma_scale.h, never run yet)
    against float64 of the dequantized operands, element by element against |A| |B|^T (fp32 sums,
    one bf16 rounding): blocks of comparable size (scales 2^-2 .. 2^2 apart) and odd shapes, so a
    wrong lane, row, k-group or scale mapping moves elements by their own size."""
    from kosmos.reference import rel_error

    if not mx.scaled_mfma_available():
        pytest.skip("CDNA4's block-scaled MFMA needs a gfx950 GPU")

    rng = np.random.default_rng([m, n, k])
    ops = []
    for rows in (m, n):
        x = (rng.standard_normal((rows, k)) * np.exp2(rng.integers(-2, 3, (rows, k // 32))).repeat(32, 1))
        t = mx.quantize(x.astype(np.float32), axis=1)
        ops.append((mx.to_device(t), mx.dequantize(t).astype(np.float64)))
    (a_mx, a), (b_mx, b) = ops
    got = cupy.asnumpy(mx.matmul_scaled_mfma(a_mx, b_mx, out=poisoned((m, n), bfloat16))).astype(np.float64)
    bound = 8e-3 * (np.abs(a) @ np.abs(b).T)
    assert (np.abs(got - a @ b.T) <= bound).all()
    assert rel_error(got, a @ b.T) < 1e-2


def test_scaled_mfma_gemm_is_refused_without_gfx950():
    if mx.scaled_mfma_available():
        pytest.skip("this GPU has the block-scaled MFMA")
    t = mx.to_device(mx.quantize(np.ones((64, 64), np.float32), axis=1))
    with pytest.raises(RuntimeError, match="gfx950"):
        mx.matmul_scaled_mfma(t, t)
