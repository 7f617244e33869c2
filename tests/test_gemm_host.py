"""CPU tests of the GEMM op's host logic: shapes, validation, tile counts, the shape table."""
from __future__ import annotations

import numpy as np
import pytest

from kosmos import gemm
from kosmos.shapes import load_llama3_shapes
from kosmos.runtime.source import hipsrc_dir


def test_device_constants():
    # the mirror of config.h (checked against the header at compile time: test_compile.py)
    c = gemm.device_constants()
    assert gemm.block_threads() == c["kThreads"] == 384
    assert gemm.tile_shape() == (128, 256, 64)
    # the Hopper builder's shared memory fits the opt-in limit (232448 B) next to the 1 KB of static
    # shared memory ptxas reports; the portable layers' fits gfx942's 64 KiB of LDS (test_compile.py
    # checks each AMD kernel's static part) and an sm_80's 164 KiB
    assert c["kSmemBytesHopper"] + 1024 <= 232448
    assert c["kSmemBytesPortable"] <= 65536 - 4096


@pytest.mark.parametrize(
    "layout,a,b,expect",
    [
        ("TN", (333, 192), (320, 192), (333, 320, 192, (333, 320))),
        ("NN", (257, 448), (448, 384), (257, 384, 448, (257, 384))),
        ("NT", (301, 192), (301, 320), (192, 320, 301, (192, 320))),
    ],
)
def test_gemm_shape(layout, a, b, expect):
    s = gemm.gemm_shape(layout, a, b)
    assert (s.mo, s.no, s.kr, s.out_shape) == expect
    assert s.flops == 2 * expect[0] * expect[1] * expect[2]


@pytest.mark.parametrize(
    "layout,a,b,msg",
    [
        ("TN", (128, 96), (128, 96), "K = 96"),
        ("TN", (128, 128), (100, 128), "N = 100"),
        ("TN", (128, 128), (128, 192), "same K"),
        ("NN", (128, 128), (192, 128), "same N"),
        ("NT", (128, 128), (64, 128), "same M"),
        ("NN", (0, 128), (128, 128), "M = 0"),
        ("TN", (128,), (128, 128), "2-D"),
        ("XX", (128, 128), (128, 128), "layout"),
    ],
)
def test_gemm_shape_rejects(layout, a, b, msg):
    with pytest.raises(ValueError, match=msg):
        gemm.gemm_shape(layout, a, b)


def test_swiglu_shape():
    s = gemm.gemm_shape("TN", (100, 256), (384, 256), "swiglu")
    assert s.out_shape == (100, 192) and s.swiglu_f == 192
    assert gemm.tile_counts(s) == (1, 2, 4)
    with pytest.raises(ValueError, match="forward"):
        gemm.gemm_shape("NT", (100, 256), (100, 256), "swiglu")
    with pytest.raises(ValueError, match="2F rows"):
        gemm.gemm_shape("TN", (100, 256), (320, 256), "swiglu")


def test_gate_up_rules():
    """gate_up: refused under "store", optional under "swiglu", required under "swiglu_backward"
    (the shape and dtype checks need a GPU array: tests/gpu/test_gemm.py)."""
    store = gemm.gemm_shape("TN", (100, 256), (384, 256))
    with pytest.raises(ValueError, match="gate_up is for the SwiGLU"):
        gemm.gate_up_array(object(), store, 0)
    assert gemm.gate_up_array(None, store, 0) is None
    assert gemm.gate_up_array(None, gemm.gemm_shape("TN", (100, 256), (384, 256), "swiglu"), 0) is None
    with pytest.raises(ValueError, match="needs gate_up"):
        gemm.gate_up_array(None, gemm.gemm_shape("NN", (100, 256), (256, 192), "swiglu_backward"), 0)


def test_swiglu_backward_shape():
    """dA = dY W2 (NN, [M, F]) with d[gate, up] [M, 2F] out: the GEMM's tiles are dA's."""
    s = gemm.gemm_shape("NN", (100, 512), (512, 192), "swiglu_backward")
    assert (s.mo, s.no, s.kr, s.out_shape, s.swiglu_f, s.epilogue) == (100, 192, 512, (100, 384), 0, "swiglu_backward")
    assert gemm.tile_counts(s) == (1, 1, 8)
    assert gemm.kernel_name("NN", "swiglu_backward", None) == "kosmos_gemm_nn_swiglu_bwd"
    with pytest.raises(ValueError, match="dgrad"):
        gemm.gemm_shape("TN", (100, 256), (384, 256), "swiglu_backward")
    with pytest.raises(ValueError, match="runs 256-wide tiles"):
        gemm.check_tile_n(128, "swiglu_backward", True)
    with pytest.raises(TypeError, match="writes bf16"):
        gemm.resolve_out_dtype(np.float32, "swiglu_backward")


def test_tile_counts_and_grid():
    s = gemm.gemm_shape("TN", (8192, 4096), (13312, 4096))
    assert gemm.tile_counts(s) == (64, 52, 64)
    s = gemm.gemm_shape("NT", (1999, 384), (1999, 512))  # reduction tail: 1999 = 31*64 + 15
    assert gemm.tile_counts(s) == (3, 2, 32)
    assert gemm.grid_size(3328, 132, None) == 132
    assert gemm.grid_size(3328, 132, 116) == 116
    assert gemm.grid_size(3328, 132, 500) == 132
    assert gemm.grid_size(6, 132, None) == 6
    with pytest.raises(ValueError, match="sm_cap"):
        gemm.grid_size(10, 132, 0)


def test_tile_order_is_a_permutation_grouped_by_rows():
    s = gemm.gemm_shape("TN", (128 * 19, 64), (256 * 5, 64))
    order = gemm.tile_order(s)
    assert sorted(order) == [(m, n) for m in range(19) for n in range(5)]
    # The first group walks kGroupM tile rows before moving to the next tile column.
    g = gemm.device_constants()["kGroupM"]
    assert order[:g] == [(m, 0) for m in range(g)]


def test_param_structs_match_the_device_layout():
    # Problem: 2 pointers + 10 int32 + one int64 + the MXFP8 A scales' pointer = 72 bytes; epilogues:
    # pointer + 3 int32 -> 24 (every offset is checked against the C structs at compile time:
    # test_compile.py).
    assert gemm.PROBLEM_DTYPE.itemsize == 80
    assert gemm.PROBLEM_DTYPE.fields["b_group_stride"][1] == 56
    assert gemm.PROBLEM_DTYPE.fields["a_scales"][1] == 64
    assert gemm.EPI_DTYPE.itemsize == 24
    assert gemm.TMAP_DTYPE.itemsize == 128


def test_kernel_names_and_out_dtype():
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert gemm.kernel_name("NN", "store", np.float32) == "kosmos_gemm_nn_f32"
    assert gemm.kernel_name("TN", "swiglu", bf16) == "kosmos_gemm_tn_swiglu"
    assert gemm.resolve_out_dtype(None, "store") == bf16
    with pytest.raises(TypeError):
        gemm.resolve_out_dtype(np.float16, "store")
    with pytest.raises(TypeError):
        gemm.resolve_out_dtype(np.float32, "swiglu")
    src = (hipsrc_dir() / "gemm.hip").read_text()
    for layout in gemm.LAYOUTS:
        for dt in (bf16, np.float32):
            assert gemm.kernel_name(layout, "store", dt) + "," in src
    assert gemm.kernel_name("NN", "swiglu_backward", None) + "," in src
    for layout in gemm.LAYOUTS:
        assert gemm.kernel_name(layout, "accumulate", np.float32) + "," in src
    assert gemm.resolve_out_dtype(np.float32, "accumulate") == np.float32
    with pytest.raises(TypeError, match="float32"):
        gemm.resolve_out_dtype(None, "accumulate")
    with pytest.raises(ValueError, match="256-wide"):
        gemm.check_tile_n(192, "accumulate", True)
    assert gemm.stores_through_tma("accumulate", True) and not gemm.stores_through_tma("swiglu", True)


def test_llama3_shape_table():
    shapes = load_llama3_shapes()
    by_kernel = {}
    for s in shapes:
        by_kernel.setdefault(s.kernel, []).append(s)
    assert sorted(by_kernel) == ["ag_nn", "ag_tn", "bulk_ag_nn", "bulk_rs_nt", "tn_rs"]
    assert all(len(v) == 24 for v in by_kernel.values())
    layouts = {k: v[0].layout for k, v in by_kernel.items()}
    assert layouts == {"ag_tn": "TN", "tn_rs": "TN", "ag_nn": "NN", "bulk_ag_nn": "NN", "bulk_rs_nt": "NT"}
    first = {k: (v[0].name, v[0].m, v[0].n, v[0].k) for k, v in by_kernel.items()}
    assert first["ag_tn"] == ("405B-FC1-MBS1", 8192, 13312, 16384)  # Table C.3
    assert first["tn_rs"] == ("405B-Down-MBS1", 8192, 16384, 6656)  # Table C.5
    assert first["ag_nn"] == ("405B-Down-MBS1", 8192, 6656, 16384)  # Table C.7
    assert first["bulk_ag_nn"] == ("405B-FC1-MBS1", 8192, 16384, 13312)  # Table C.9
    assert first["bulk_rs_nt"] == ("405B-FC1-MBS1", 13312, 16384, 8192)  # Table C.11
    for s in shapes:
        a, b, out = s.operand_shapes()
        g = gemm.gemm_shape(s.layout, a, b)
        assert g.out_shape == out and g.flops == s.flops, s
        tokens = s.k if s.layout == "NT" else s.m
        assert tokens in (8192, 16384, 32768, 65536) and tokens == 8192 * int(s.name.split("MBS")[1])


def test_split_k_choice_and_checks():
    # 96 tiles on 132 SMs with a deep reduction: 4 K-ranges fill ~3 waves of the grid.
    assert gemm.choose_split_k(96, 132, 1024, 768 * 4096) == 4
    # The same tiles with a short reduction: the partials' traffic costs more than the idle SMs.
    assert gemm.choose_split_k(96, 132, 128, 768 * 4096) == 1
    # Plenty of tiles: never split; a grid of a wave or more neither (measured: splitting 320 tiles by 2 lost).
    assert gemm.choose_split_k(3328, 132, 256, 8192 * 13312) == 1
    assert gemm.choose_split_k(320, 132, 1024, 1280 * 8192) == 1
    # A 15% win is required: 96 tiles with 256 slabs would gain only ~9%.
    assert gemm.choose_split_k(96, 132, 256, 768 * 4096) == 1
    # Every K-range keeps MIN_SLABS_PER_SPLIT slabs.
    assert gemm.choose_split_k(1, 132, 2 * gemm.MIN_SLABS_PER_SPLIT - 1, 128 * 256) == 1
    assert gemm.check_split_k(3, 5) == 3
    with pytest.raises(ValueError, match="empty K-ranges"):
        gemm.check_split_k(4, 5)  # ranges of 2 slabs: 2, 2, 1, 0
    with pytest.raises(ValueError, match="split_k"):
        gemm.check_split_k(0, 5)
    assert "k_splits" in gemm.PROBLEM_DTYPE.names


def test_tile_width_chooser():
    # 64 tiles of 256 (half a wave on 132 SMs) against 128 of 128 (and 88 of 192): one wave each.
    assert gemm.choose_tile_n({256: 64, 128: 128}, 132) == 128
    assert gemm.choose_tile_n({256: 64, 192: 88, 128: 128}, 132) == 128
    # Many waves: the wide tile's efficiency wins.
    assert gemm.choose_tile_n({256: 4096, 192: 5462, 128: 8192}, 132) == 256
    # 192 tiles (2 waves) vs 384 (3 waves of half the work): 1.83 < 0.95 * 2.
    assert gemm.choose_tile_n({256: 192, 128: 384}, 132) == 128
    # qwen3 GEMM1 2048 (2048 x 3072): 192 tiles of 256, 256 of 192 (2 waves of 3/4 the work), 384 of
    # 128: 192 wins (measured 1.18x the 128-wide tile, bench/results/gemm_both_w1_n192_2e11693.json).
    assert gemm.choose_tile_n({256: 192, 192: 256, 128: 384}, 132) == 192
    assert gemm.choose_tile_n({256: 64}, 132) == 256  # the only width allowed
    # choose_tiling (get_plan's automatic choice and the fused ops'): stream-K where it is allowed and
    # choose_stream_k takes it (NT 8B-FC1-MBS1: measured 1.07x whole tiles), else choose_tile_n. Its
    # 448 tiles: 3 whole waves, the last 52 tiles in 2 K-ranges (104 units: one round on 132 CTAs).
    nt = gemm.gemm_shape("NT", (8192, 3584), (8192, 4096))
    tile_n, sk = gemm.choose_tiling(nt, 132, gemm.TILE_WIDTHS, True)
    assert tile_n == 256 and sk == gemm.stream_k_split(448, 132, 128) and (sk.full, sk.ranges) == (396, 2)
    assert gemm.choose_tiling(nt, 132, gemm.TILE_WIDTHS, False) == (256, None)
    qkv = gemm.gemm_shape("TN", (8192, 4096), (768, 4096))
    assert gemm.choose_tiling(qkv, 132, gemm.TILE_WIDTHS, True) == (192, None)  # 192 beats stream-K there
    s = gemm.gemm_shape("TN", (256, 1024), (8192, 1024))
    assert gemm.tile_counts(s, 128) == (2, 64, 16)
    assert gemm.kernel_name("NT", "store", np.float32, 128) == "kosmos_gemm_nt_f32_n128"
    assert gemm.kernel_name("TN", "store", np.float32, 192) == "kosmos_gemm_tn_f32_n192"
    with pytest.raises(ValueError, match="tile_n must be"):
        gemm.check_tile_n(64, "store", True)
    with pytest.raises(ValueError, match="swiglu.*256-wide"):
        gemm.check_tile_n(128, "swiglu", True)
    with pytest.raises(ValueError, match="256-wide"):
        gemm.check_tile_n(128, "store", False)
    from kosmos.runtime.source import hipsrc_dir

    text = (hipsrc_dir() / "gemm.hip").read_text()
    for layout in ("TN", "NN", "NT"):
        for dt in (np.float32, None):
            for width in gemm.TILE_WIDTHS:
                assert gemm.kernel_name(layout, "store", dt or np.dtype("V2"), width) + "," in text
    for width in gemm.TILE_WIDTHS:  # the swapped MXFP8 TN's transposed stores (bf16 only)
        assert gemm.kernel_name("TN", "store", gemm._bf16(), width, mx_a=True, transposed=True) + "," in text
    assert gemm.kernel_name("TN", "store", gemm._bf16(), 192, mx_a=True, transposed=True) == "kosmos_gemm_tn_mx_bf16_n192_t"
    tp = (hipsrc_dir() / "tp.hip").read_text()  # NAME_n192 / NAME_n128 come from the TP_KERNELS macro
    assert "KERNEL(NAME##_n192, MidTile" in tp and "KERNEL(NAME##_n128, PingPongTile" in tp


def test_tma_store_follows_the_plan_not_the_kernel_name():
    """The store epilogues (bf16, fp32, split-K partials) read the output's TMA map whatever the
    kernel is called (the _n128 kernels once got a zero map, an illegal instruction on the H200);
    the SwiGLU epilogues store from registers."""
    import ml_dtypes

    from kosmos import grouped

    bf16 = np.dtype(ml_dtypes.bfloat16)
    s = gemm.gemm_shape("TN", (256, 128), (512, 128))
    for tile_n in gemm.TILE_WIDTHS:
        name = gemm.kernel_name("TN", "store", bf16, tile_n)
        plan = gemm.GemmPlan(s, bf16, name, 1, 1, gemm.tile_counts(s, tile_n), None, None, tile_n=tile_n)
        assert plan.tma_store, name
        f32 = gemm.GemmPlan(s, np.dtype(np.float32), gemm.kernel_name("TN", "store", np.float32, tile_n), 1, 1,
                            gemm.tile_counts(s, tile_n), None, None, tile_n=tile_n)
        assert f32.tma_store
    split = gemm.GemmPlan(s, bf16, "kosmos_gemm_tn_f32", 1, 1, (2, 2, 2), None, None, splits=2)
    assert split.tma_store and split.partial_rows == 256  # fp32 partials, each padded to whole tiles
    assert not gemm.GemmPlan(gemm.gemm_shape("TN", (256, 128), (512, 128), "swiglu"), bf16, "kosmos_gemm_tn_swiglu",
                             1, 1, (2, 1, 2), None, None).tma_store
    gs = grouped.grouped_shape("TN", (300, 128), (2, 256, 128), 2)
    for tile_n in grouped.TILE_WIDTHS:
        gp = grouped.GroupedPlan(gs, bf16, grouped.kernel_name("TN", "store", bf16, tile_n), 1, None, None,
                                 tile_n=tile_n)
        assert gp.tma_store
    sw = grouped.grouped_shape("TN", (300, 128), (2, 256, 128), 2, "swiglu")
    assert not grouped.GroupedPlan(sw, bf16, "kosmos_grouped_tn_swiglu", 1, None, None).tma_store


def test_problem_and_epilogue_records():
    """One builder of the device's Problem / epilogue records for every plan (dense, grouped, fused)."""
    from types import SimpleNamespace as NS

    def arr(ptr, *shape):
        return NS(data=NS(ptr=ptr), shape=shape, size=int(np.prod(shape)))

    a, b3 = arr(0x1000, 300, 128), arr(0x2000, 4, 256, 128)
    p = gemm.problem_record(a, b3, 300, 256, 128, (0, 1, 2), 0, 1, 256 * 128)
    assert (p["a"], p["b"], p["lda"], p["ldb"], p["tiles_n"], p["k_slabs"]) == (0x1000, 0x2000, 128, 128, 1, 2)
    assert (p["k_splits"], p["b_group_stride"], p["swiglu_f"]) == (1, 256 * 128, 0)
    e = gemm.epi_record(arr(0x3000, 4, 256, 128), 1024, 128)
    assert (e["out"], e["ldo"], e["mo"], e["no"]) == (0x3000, 128, 1024, 128)
    assert gemm.tile_columns(320, 0, 128) == 3 and gemm.tile_columns(640, 320, 256) == 3


@pytest.mark.parametrize("ntiles,ctas,k_slabs", [(160, 132, 80), (8, 132, 64), (40, 7, 16), (4, 3, 65), (2048, 132, 128),
                                                 (133, 132, 16), (1, 1, 24), (300, 132, 9), (50, 132, 15),
                                                 (50, 132, 33)])
def test_stream_k_units_cover_every_slab_once_range_major(ntiles, ctas, k_slabs):
    """The host's model of StreamKSchedule (schedule.h): every tile's slabs are reduced exactly once
    (whole, or by its K-ranges in order, none empty); ranges are queued range-major, so each tile's
    last range (the one that waits) comes after all of its other ranges in the queue."""
    split = gemm.stream_k_split(ntiles, ctas, k_slabs)
    if k_slabs < 2 * gemm.MIN_SLABS_PER_RANGE:
        assert split is None
        return
    assert split is not None and split.full % ctas == 0 and split.full + split.tail == ntiles
    assert split.tail < 2 * ctas or split.full == 0
    assert 2 <= split.ranges <= 4 and k_slabs - (split.ranges - 1) * split.per >= gemm.MIN_SLABS_PER_RANGE
    got = {}
    for u in range(split.units):
        t, kb0, kb1, r = split.unit(u)
        assert 0 <= kb0 < kb1 <= k_slabs
        got.setdefault(t, []).append((r, kb0, kb1, u))
    assert sorted(got) == list(range(ntiles))
    for t, ps in got.items():
        if t < split.full:
            assert ps == [(-1, 0, k_slabs, t)]
            continue
        assert [r for r, *_ in ps] == list(range(split.ranges))
        assert ps[0][1] == 0 and ps[-1][2] == k_slabs
        assert all(ps[i][2] == ps[i + 1][1] for i in range(len(ps) - 1)), f"tile {t}: slabs not covered once"
        assert all(ps[i][3] < ps[-1][3] for i in range(len(ps) - 1)), "the last range is queued last"


def test_stream_k_choice():
    """The wave model takes stream-K where the H200 measured it faster (bench/results/
    gemm_both_w1_clusters_e4fe6b8+cta.json, the forced "sk" contender), never for whole waves or many."""
    # M = 256, N = K = 8192: stream-K in one round (its fix-ups exposed: ONE_ROUND_PARTIAL_SLABS)
    # loses to the ping-pong 128 (H100, session 37: 1-8 % TN, 6-13 % NN), beats whole 256 tiles
    assert not gemm.choose_stream_k({256: 64, 192: 88, 128: 128}, 132, 128)
    assert gemm.choose_stream_k({256: 64}, 132, 128)
    assert gemm.choose_stream_k({256: 320}, 132, 128)       # NT 70B-QKV-MBS1 (1280 x 8192 x 8192): +9 %
    assert not gemm.choose_stream_k({256: 192, 192: 256, 128: 384}, 132, 64)  # qwen3 GEMM1 2048: 192 wins
    assert not gemm.choose_stream_k({256: 96}, 132, 128)    # NT 8B-QKV-MBS1: model +2 %, measured -3 %
    assert not gemm.choose_stream_k({256: 264}, 132, 64)    # two whole waves
    assert not gemm.choose_stream_k({256: 2048}, 132, 128)  # 15.5 waves: the last one's idle SMs are 3 %
    assert not gemm.choose_stream_k({256: 100}, 132, 8)     # too short a reduction to cut
    assert gemm.kernel_name("NT", "store", np.float32, stream_k=True) == "kosmos_gemm_nt_f32_sk"
    from kosmos.runtime.source import hipsrc_dir

    text = (hipsrc_dir() / "gemm.hip").read_text()
    for layout in ("TN", "NN", "NT"):
        for dt in (np.float32, np.dtype("V2")):
            assert gemm.kernel_name(layout, "store", dt, stream_k=True) + "," in text
