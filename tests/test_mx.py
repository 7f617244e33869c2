"""kosmos.mx, the MXFP8 reference (NumPy + ml_dtypes), on hand-checked blocks; and the device rule
(hipsrc/kosmos/mx/quant.h) compiled for the host, bit for bit against it on random, tiny, huge,
tie, subnormal, NaN/Inf and all-zero blocks."""
from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from host_build import build
from kosmos import mx
from kosmos.dtypes import bfloat16, float8_e4m3


def codes(t: mx.MXTensor) -> tuple[np.ndarray, np.ndarray]:
    return t.data.view(np.uint8), t.scales.view(np.uint8)


def test_hand_checked_blocks():
    x = np.zeros((5, 32), np.float32)
    x[0, 0] = 1.0                    # amax 1: k = -8, element 1 * 2^8 = 256 = 0x78
    x[1, :] = 448.0                  # amax 448: k = 0, 0x7E everywhere
    x[2, 3] = -500.0                 # k = 0, 500 saturates to -448: 0xFE
    x[3, 7] = np.nan                 # poisoned block
    # x[4] all zero: k = -127 (code 0), elements 0
    data, scales = codes(mx.quantize(x))
    assert scales.ravel().tolist() == [119, 127, 127, 0xFF, 0]
    assert data[0, 0] == 0x78 and (data[0, 1:] == 0).all()
    assert (data[1] == 0x7E).all() and data[2, 3] == 0xFE
    assert (data[3] == 0x7F).all() and (data[4] == 0).all()
    y = mx.dequantize(mx.quantize(x))
    assert y[0, 0] == 1.0 and y[2, 3] == -448.0 and np.isnan(y[3]).all() and (y[4] == 0).all()


def test_representable_values_round_trip_exactly_on_both_axes():
    rng = np.random.default_rng(1)
    e4m3 = np.arange(256, dtype=np.uint8).view(float8_e4m3).astype(np.float32)
    e4m3 = e4m3[np.isfinite(e4m3)]
    x = rng.choice(e4m3, size=(64, 96)).astype(np.float32)
    x[::32, :] = 448.0  # every column block's amax is 448 too (k = 0 on both axes)
    x[:, ::32] = 448.0  # and every row block's
    for axis in (-1, 0):
        t = mx.quantize(x, axis=axis)
        assert t.scales.shape == ((64, 3) if axis == -1 else (2, 96))
        assert (mx.dequantize(t) == x).all()


def test_bf16_input_and_bad_shapes():
    x = (np.random.default_rng(2).standard_normal((4, 64))).astype(bfloat16)
    t = mx.quantize(x)
    assert t.data.shape == (4, 64) and t.scales.shape == (4, 2)
    with pytest.raises(ValueError, match="multiple of 32"):
        mx.quantize(np.zeros((4, 48), np.float32))
    with pytest.raises(TypeError):
        mx.quantize(np.zeros((4, 64), np.float64))
    with pytest.raises(ValueError):
        mx.quantize(np.float32(1.0))


@pytest.fixture(scope="module")
def mx_host(tmp_path_factory):
    return build("mx_main.cpp", tmp_path_factory.mktemp("mx") / "mx_host")


def host_blocks(exe, blocks: np.ndarray, mode: str = "") -> tuple[np.ndarray, np.ndarray]:
    n = blocks.shape[0]
    out = subprocess.run([str(exe)] + ([mode] if mode else []), input=struct.pack("<i", n) + blocks.astype(np.float32).tobytes(),
                         capture_output=True, check=True).stdout
    return np.frombuffer(out[:32 * n], np.uint8).reshape(n, 32), np.frombuffer(out[32 * n:], np.uint8)


# "ftz": subnormal operands and results flushed, as in every CuPy-compiled kernel (-ftz=true); the
# device rule must not depend on it (bf16 subnormal inputs are fp32 subnormals).
@pytest.mark.parametrize("mode", ["", "ftz"])
def test_the_device_rule_is_the_reference_bit_for_bit(mx_host, mode):
    rng = np.random.default_rng(3)
    n = 20000
    mags = np.exp2(rng.uniform(-140, 120, size=(n, 1)))            # tiny to huge blocks
    blocks = (rng.standard_normal((n, 32)) * mags).astype(np.float32)
    spread = rng.integers(0, n, 3000)                              # elements far below their block's amax
    blocks[spread, rng.integers(0, 32, 3000)] *= np.exp2(-rng.uniform(0, 40, 3000)).astype(np.float32)
    # ties: midpoints between neighbouring E4M3 values (times the block scale), and one ulp either side
    e4m3 = np.sort(np.unique(np.abs(np.arange(256, dtype=np.uint8).view(float8_e4m3).astype(np.float32))))
    e4m3 = e4m3[np.isfinite(e4m3)]
    mids = ((e4m3[1:] + e4m3[:-1]) / 2).astype(np.float32)
    ties = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), [460, 464, 480, 500, 511.9]])
    t = np.zeros((-(-len(ties) // 31), 32), np.float32)
    t[:, 0] = 448.0                                                # amax 448: k = 0, the ties land as is
    t[:, 1:].flat[:len(ties)] = ties * rng.choice([-1, 1], len(ties))
    special = np.zeros((6, 32), np.float32)
    special[0, 4] = np.nan
    special[1, 9] = np.inf
    special[2, 0] = -np.inf
    special[3, :] = np.float32(1e-40)                              # fp32 subnormals
    special[4, :] = -0.0
    special[5, :] = np.finfo(np.float32).max
    blocks = np.concatenate([blocks, t, special])
    want = mx.quantize(blocks)
    data, scales = host_blocks(mx_host, blocks, mode)
    want_data, want_scales = codes(want)
    bad = np.flatnonzero((data != want_data).any(axis=1) | (scales != want_scales.ravel()))
    assert bad.size == 0, f"{bad.size} blocks differ, first {bad[:5]}: {blocks[bad[0]]}"


def test_dequantize_to_bf16_is_the_reference_bit_for_bit(mx_host):
    """hipsrc/kosmos/mx/dequant.h on every (E4M3 code, E8M0 scale) pair against
    kosmos.mx.dequantize(...).astype(bfloat16): the same bits, NaN where either is NaN."""
    codes = np.repeat(np.arange(256, dtype=np.uint8), 256)
    scales = np.tile(np.arange(256, dtype=np.uint8), 256)
    n = codes.size
    out = subprocess.run([str(mx_host), "dequant"], input=struct.pack("<i", n) + codes.tobytes() + scales.tobytes(),
                         capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.uint16)
    # the reference, one block per (code, scale): 32 copies of the code under that scale
    t = mx.MXTensor(np.repeat(codes, 32).reshape(n, 32).view(float8_e4m3),
                    scales.reshape(n, 1).view(mx.float8_e8m0), 1)
    with np.errstate(over="ignore"):  # products past fp32 (and bf16): Inf, as the device gives
        want = mx.dequantize(t)[:, 0].astype(bfloat16).view(np.uint16)
    nan_got = (got & 0x7FFF) > 0x7F80
    nan_want = (want & 0x7FFF) > 0x7F80
    assert (nan_got == nan_want).all(), f"{(nan_got != nan_want).sum()} NaN mismatches"
    bad = np.flatnonzero((got != want) & ~nan_want)
    assert bad.size == 0, (f"{bad.size} pairs differ, first code {codes[bad[0]]:#04x} scale {scales[bad[0]]}: "
                           f"got {got[bad[0]]:#06x}, want {want[bad[0]]:#06x}")
    assert nan_want.sum() == 2 * 256 + 254  # NaN codes 0x7F/0xFF at every scale, the NaN scale for the rest


def random_mx_codes(rows: int, cols: int, axis: int, seed) -> tuple[bytes, np.ndarray]:
    """Random E4M3 codes [rows, cols] (no NaN codes: every bit compares) and E8M0 scales blocked
    along `axis`, as the host harness reads them (codes, then scales), and their reference
    dequantization to bf16 bits."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
    data[data & 0x7F == 0x7F] = 0x3C
    sshape = (rows, cols // 32) if axis == 1 else (rows // 32, cols)
    scales = rng.integers(100, 150, sshape, dtype=np.uint8)
    t = mx.MXTensor(data.view(float8_e4m3), scales.view(mx.float8_e8m0), axis)
    return data.tobytes() + scales.tobytes(), mx.dequantize(t).astype(bfloat16).view(np.uint16)


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("rows,cols,ctas", [(32, 32, 1), (96, 160, 2), (256, 64, 5), (224, 544, 3), (64, 32, 7)])
def test_the_grid_loop_reads_each_elements_own_scale(mx_host, axis, rows, cols, ctas):
    """grid_dequant_rows (hipsrc/kosmos/mx/dequant.h: the dequantize kernel's loop, row by row)
    against the reference, blocks along rows and along columns, with CTAs that get unequal shares
    of the bands (and none): every element must read its own block's scale."""
    codes_scales, want = random_mx_codes(rows, cols, axis, [rows, cols, axis])
    head = struct.pack("<4i", rows, cols, 1 if axis == 1 else 2, ctas)
    out = subprocess.run([str(mx_host), "grid"], input=head + codes_scales, capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.uint16).reshape(rows, cols)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("row0,count,threads", [(0, 256, 7), (256, 40, 5), (40, 100, 3), (77, 1, 2), (95, 33, 64)])
def test_a_pull_writes_its_rows_and_nothing_else(mx_host, axis, row0, count, threads):
    """cta_dequant_rows (a mover's pull of rows [row0, row0 + count) of a peer's shard, ranges that
    start and end inside 32-row bands) writes exactly those rows, each element with its own scale:
    the guard rows either side of the destination stay untouched."""
    rows, cols = 352, 96
    codes_scales, want = random_mx_codes(rows, cols, axis, [row0, count, axis])
    head = struct.pack("<6i", rows, cols, 1 if axis == 1 else 2, threads, row0, count)
    out = subprocess.run([str(mx_host), "range"], input=head + codes_scales, capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.uint16).reshape(count + 2, cols)
    assert (got[0] == 0xFFFF).all() and (got[-1] == 0xFFFF).all(), "the pull wrote outside its rows"
    np.testing.assert_array_equal(got[1:-1], want[row0:row0 + count])


def test_k_permutation_is_the_fragment_layout():
    """The MXFP8-A mainloop's slab permutation: a bijection of 0..63 where thread q's 16 consecutive
    codes land at wgmma step kk's columns 2q, 2q + 1 (codes 4 kk, 4 kk + 1) and 2q + 8, 2q + 9
    (codes 4 kk + 2, 4 kk + 3), as builder_wgmma.h consume_mx_slab loads them."""
    perm = mx.k_permutation()
    assert sorted(perm.tolist()) == list(range(64))
    for q in range(4):
        for kk in range(4):
            for j in range(4):
                column = 16 * kk + 2 * q + (j % 2) + 8 * (j // 2)
                assert perm[column] == 16 * q + 4 * kk + j


@pytest.mark.parametrize("axis", [0, 1])
def test_permute_k_keeps_the_product(axis):
    """Permuting both operands' reduction index alike (and padding it with zeros to whole slabs)
    leaves the product unchanged: integers, so exactly."""
    rng = np.random.default_rng(axis)
    a = rng.integers(-8, 8, size=(5, 96))
    b = rng.integers(-8, 8, size=(96, 7) if axis == 0 else (7, 96))
    ap = mx.permute_k(a, 1)
    bp = mx.permute_k(b, axis)
    assert ap.shape == (5, 128) and bp.shape[axis] == 128
    padded = np.concatenate([a, np.zeros((5, 32), a.dtype)], axis=1)
    for slab in (slice(0, 64), slice(64, 128)):  # each slab a permutation of its own (padded) codes
        assert (np.sort(ap[:, slab], axis=1) == np.sort(padded[:, slab], axis=1)).all()
    want = a @ (b if axis == 0 else b.T)
    got = ap @ (bp if axis == 0 else bp.T)
    assert (got == want).all()


def test_mx_a_path_is_taken_where_the_mainloop_can():
    from kosmos import gemm

    assert gemm.mx_a_path("TN", "store", 1, None, True)
    assert gemm.mx_a_path("NN", "store", None, False, True)
    assert not gemm.mx_a_path("NT", "store", 1, None, True)        # A MN-major: dequantized first
    assert not gemm.mx_a_path("TN", "swiglu", 1, None, True)
    assert not gemm.mx_a_path("TN", "store", 2, None, True)         # split-K
    assert not gemm.mx_a_path("TN", "store", 1, True, True)         # stream-K asked for
    assert not gemm.mx_a_path("TN", "store", 1, None, False)        # not Hopper
    assert gemm.mx_a_path("TN", "store", 1, None, True, 2048, 2048)
    assert not gemm.mx_a_path("TN", "store", 1, None, True, 2048 + 64, 2048)  # wide: pass first
    assert gemm.mx_a_max_columns("NVIDIA H100 80GB HBM3") == 4096           # the measured crossovers
    assert gemm.mx_a_max_columns("NVIDIA H200") == 2048
    assert gemm.mx_a_max_columns("gfx950") == gemm.MX_A_COLUMNS_ELSEWHERE
    assert gemm.kernel_name("NN", "store", np.float32, 192, mx_a=True) == "kosmos_gemm_nn_mx_f32_n192"


def test_mx_swap_pays_where_b_is_much_taller():
    """A wgrad as a TN on transposed column copies: dW [768, 4096] over 8,192 tokens swaps (B's rewrite
    of 4,096 rows against 768 and a transposed 768 x 4,096 result); a square one, a bf16 GEMM's
    shape with a shorter b, NN, or a short reduction do not."""
    from kosmos import gemm

    def pays(layout, a, b, out_bytes=2):
        return gemm.mx_swap_pays(gemm.gemm_shape(layout, a, b), out_bytes)

    assert pays("TN", (768, 8192), (4096, 8192))
    assert pays("TN", (1280, 32768), (8192, 32768), out_bytes=4)
    assert not pays("TN", (3584, 8192), (4096, 8192))       # 512 rows saved < the transpose
    assert not pays("TN", (4096, 8192), (768, 8192))        # b already the shorter
    assert not pays("TN", (768, 256), (4096, 256))          # short reduction: the transpose dominates
    assert not pays("NN", (768, 8192), (8192, 4096))
    route = {s: gemm.mx_route(gemm.gemm_shape("TN", a, b), True, 2, 1, None, None, True, 4096)
             for s, a, b in (("swap", (768, 8192), (4096, 8192)), ("wide", (13312, 65536), (16384, 65536)),
                             ("fprop", (8192, 4096), (3584, 4096)))}
    assert route == {"swap": "swapped", "wide": "pass", "fprop": "regs"}
    assert gemm.mx_route(gemm.gemm_shape("TN", (768, 8192), (4096, 8192)), True, 2, 1, None, 256, True, 4096) == "regs"
    # a's 100 rows would be the swapped GEMM's N (not a multiple of 64): it has no swapped form
    assert pays("TN", (100, 8192), (4096, 8192))
    assert gemm.mx_route(gemm.gemm_shape("TN", (100, 8192), (4096, 8192)), True, 2, 1, None, None, True, 4096) == "regs"
    assert gemm.mx_route(gemm.gemm_shape("TN", (768, 8192), (4096, 8192)), False, 2, 1, None, None, True, 4096) == "regs"


def test_gfx950_routes_mxfp8_tn_to_the_scaled_mfma():
    """On gfx950 (scaled_mfma) a TN of two MXFP8 operands goes to the block-scaled MFMA builder
    (kosmos_gemm_tn_mx2_*), whole 128 x 256 tiles; anything else keeps its route (the dequantizing
    one off Hopper), and no other GPU takes it."""
    from kosmos import gemm
    from kosmos.runtime.source import hipsrc_dir

    tn = gemm.gemm_shape("TN", (768, 8192), (4096, 8192))

    def route(shape=tn, b_is_mx=True, split_k=1, stream_k=None, tile_n=None, scaled=True):
        return gemm.mx_route(shape, b_is_mx, 2, split_k, stream_k, tile_n, False, 2048, scaled_mfma=scaled)

    assert route() == "scaled" and route(tile_n=256) == "scaled" and route(split_k=None) == "scaled"
    assert route(scaled=False) == "pass"
    assert route(b_is_mx=False) == "pass"      # a bf16 B: dequantize A (no MXFP8-A layer off Hopper)
    assert route(tile_n=128) == "pass" and route(split_k=2) == "pass" and route(stream_k=True) == "pass"
    assert route(shape=gemm.gemm_shape("NN", (768, 8192), (8192, 4096))) == "pass"
    assert gemm.kernel_name("TN", "store", bfloat16, mx_a=True, mx_b=True) == "kosmos_gemm_tn_mx2_bf16"
    src = (hipsrc_dir() / "gemm.hip").read_text()
    for dt in (bfloat16, np.float32):
        assert gemm.kernel_name("TN", "store", dt, mx_a=True, mx_b=True) + "," in src
    assert gemm.PROBLEM_DTYPE.fields["b_scales"][1] == 72 and gemm.PROBLEM_DTYPE.itemsize == 80
