"""Host logic of kosmos.grouped (no GPU): operand shapes, limits, kernel names, status messages."""
from __future__ import annotations

import numpy as np
import pytest

from kosmos import grouped


def test_shapes_per_layout():
    s = grouped.grouped_shape("TN", (1000, 512), (8, 768, 512), 8)
    assert (s.mo, s.no, s.kr, s.out_shape, s.tiles()) == (1000, 768, 512, (1000, 768), (0, 3, 8))
    s = grouped.grouped_shape("NN", (1000, 768), (8, 768, 512), 8)
    assert (s.mo, s.no, s.kr, s.out_shape, s.tiles()) == (1000, 512, 768, (1000, 512), (0, 2, 12))
    s = grouped.grouped_shape("NT", (1000, 768), (1000, 512), 8)
    assert (s.mo, s.no, s.out_shape, s.tiles()) == (768, 512, (8, 768, 512), (6, 2, 0))
    s = grouped.grouped_shape("TN", (1000, 512), (8, 768, 512), 8, "swiglu")
    assert (s.out_shape, s.swiglu_f, s.tiles()) == ((1000, 384), 384, (0, 3, 8))
    assert s.flops(10) == 2 * 10 * 768 * 512
    s = grouped.grouped_shape("NN", (1000, 512), (8, 512, 192), 8, "swiglu_backward")
    assert (s.out_shape, s.no, s.tiles(), s.epilogue) == ((1000, 384), 192, (0, 1, 8), "swiglu_backward")
    assert grouped.grouped_shape("NT", (10, 64), (10, 64), 3).flops(10) == 2 * 10 * 64 * 64


@pytest.mark.parametrize("args,match", [
    (("TN", (100, 128), (3, 256, 128), 2), "E = 2"),
    (("TN", (100, 128), (2, 256, 192), 2), "same K"),
    (("NN", (100, 128), (2, 256, 128), 2), "same N"),
    (("NT", (100, 128), (99, 128), 2), "same R"),
    (("TN", (100, 128), (2, 100, 128), 2), "N = 100"),
    (("TN", (0, 128), (2, 256, 128), 2), "at least one"),
    (("TN", (100, 128), (2, 256, 128), 0), "1 to 256"),
    (("TN", (100, 128), (300, 256, 128), 300), "1 to 256"),
    (("TN", (2**23, 128), (2, 256, 128), 2), "fewer than"),
    (("NN", (100, 128), (2, 128, 256), 2, "swiglu"), "forward"),
    (("TN", (100, 128), (2, 320, 128), 2, "swiglu"), "2F rows"),
    (("TN", (100, 128), (2, 256, 128), 2, "swiglu_backward"), "dgrad"),
    (("XX", (100, 128), (2, 256, 128), 2), "layout"),
    (("NN", (100, 128), (2, 128, 256), 2, "accumulate"), "epilogue must be one of"),  # kosmos.matmul's only
])
def test_bad_shapes(args, match):
    with pytest.raises(ValueError, match=match):
        grouped.grouped_shape(*args)


def test_names_dtypes_and_status():
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert grouped.kernel_name("NT", "store", np.float32) == "kosmos_grouped_nt_f32"
    assert grouped.kernel_name("TN", "swiglu", bf16) == "kosmos_grouped_tn_swiglu"
    assert grouped.resolve_out_dtype("NT", np.float32, "store") == np.float32
    with pytest.raises(TypeError, match="wgrad"):
        grouped.resolve_out_dtype("TN", np.float32, "store")
    assert grouped.status_message(0) is None
    assert grouped.status_message(3, np.array([1, 2, -5])) == "group_rows[2] (-5) is negative"
    assert "sum (3) past" in grouped.status_message(2**64 - 1, np.array([1, 2]))


def test_every_grouped_kernel_exists_in_the_source():
    from kosmos.runtime.source import hipsrc_dir

    text = (hipsrc_dir() / "grouped.hip").read_text()
    for layout in grouped.LAYOUTS:
        assert grouped.kernel_name(layout, "store", None) in text  # None: the default bf16
    assert grouped.kernel_name("NT", "store", np.float32) in text
    assert grouped.kernel_name("TN", "swiglu", None) in text
    assert grouped.kernel_name("NN", "swiglu_backward", None) in text
    for width, tile in ((192, "MidTile"), (128, "PingPongTile")):  # the narrow ones from KOSMOS_GROUPED_NARROW
        assert f"KOSMOS_GROUPED_NARROW(n{width}, {tile})" in text
        for layout, dt in [(lo, None) for lo in grouped.LAYOUTS] + [("NT", np.float32)]:
            name = grouped.kernel_name(layout, "store", dt, width)
            assert name.replace(f"_n{width}", "_##SUFFIX") in text, name
    s = grouped.grouped_shape("TN", (1000, 512), (8, 768, 512), 8)
    assert (s.tiles(128), s.tile_estimate(256), s.tile_estimate(128)) == ((0, 6, 8), 8 * 3, 8 * 6)
