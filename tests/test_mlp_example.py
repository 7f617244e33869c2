"""The MLP-block example's float64 references on the CPU (the GPU run compares against them):
both run on small shapes, and the MXFP8 emulation lands as far from the exact block as MXFP8's
own error says (E4M3: 3 mantissa bits) -- not zero (nothing quantized) and not garbage."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch" / "examples"))

import mlp_block  # noqa: E402

from kosmos.dtypes import bfloat16  # noqa: E402
from kosmos.reference import rel_error  # noqa: E402


def test_references_run_and_mxfp8_is_mxfp8_far_from_exact():
    rng = np.random.default_rng(0)
    P, m, H, F = 2, 64, 128, 256
    xs = [rng.standard_normal((m, H)).astype(bfloat16) for _ in range(P)]
    w1s = [(rng.standard_normal((2 * F // P, H)) * H ** -0.5).astype(bfloat16) for _ in range(P)]
    w2s = [(rng.standard_normal((H, F // P)) * F ** -0.5).astype(bfloat16) for _ in range(P)]
    ds = [rng.standard_normal((m, H)).astype(bfloat16) for _ in range(P)]
    exact = mlp_block.reference(xs, w1s, w2s, ds, P, F // P)
    emulated = mlp_block.reference(xs, w1s, w2s, ds, P, F // P, mlp_block.mxfp8)
    for r in range(P):
        assert exact[r].keys() == emulated[r].keys() == {"out", "dx", "dw1", "dw2"}
        for key, v in exact[r].items():
            err = rel_error(emulated[r][key], v)
            assert 0.02 < err < mlp_block.TOL_MX, (r, key, err)
