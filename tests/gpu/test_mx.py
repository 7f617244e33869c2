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
