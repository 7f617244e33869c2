"""GPU test of kosmos.mx.quantize_both: both MXFP8 copies of a bf16 matrix, bit for bit against the
NumPy reference (kosmos.mx.quantize on each axis), with tiny, huge, NaN, Inf and all-zero blocks."""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from kosmos import mx  # noqa: E402
from kosmos.dtypes import bfloat16  # noqa: E402


@pytest.mark.parametrize("shape", [(32, 32), (96, 160), (512, 1024)])
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


@pytest.mark.parametrize("shape", [(64, 96), (512, 1024)])
def test_device_dequantize_is_the_reference(shape):
    """kosmos.mx.dequantize_device on both copies of quantize_both: bit for bit
    dequantize(quantize(x, axis)).astype(bfloat16), every code and scale range covered by the data."""
    rng = np.random.default_rng(sum(shape))
    mags = np.exp2(rng.uniform(-133, 126, size=(shape[0], 1))).astype(np.float32)
    x = (rng.standard_normal(shape).astype(np.float32) * mags).astype(bfloat16)
    x[1, 5] = np.nan
    for got, axis in zip(mx.quantize_both(cupy.asarray(x)), (-1, 0)):
        with np.errstate(over="ignore"):
            want = mx.dequantize(mx.quantize(x, axis=axis)).astype(bfloat16).view(np.uint16)
        out = cupy.asnumpy(mx.dequantize_device(got)).view(np.uint16)
        nan = (want & 0x7FFF) > 0x7F80
        assert (((out & 0x7FFF) > 0x7F80) == nan).all(), axis
        assert (out[~nan] == want[~nan]).all(), axis
