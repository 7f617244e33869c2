"""MXFP8 (OCP Microscaling v1.0, E4M3 elements): the NumPy reference of quantize and dequantize.

    t = quantize(x, axis=-1)      # x: float32 or bf16 NumPy array; blocks of 32 along `axis`
    t.data                        # float8_e4m3fn, x's shape
    t.scales                      # float8_e8m0fnu, x's shape with `axis` divided by 32
    y = dequantize(t)             # float32: data * 2^scale, exact

The rule, per block of 32 consecutive elements along `axis` (the GEMM's contracting dimension:
row-wise for X[M, K] in X W^T is axis=-1, its column-wise copy for the wgrad is axis=0, each
computed from the high-precision source, never one from the other):
- amax = max |v|; the shared scale X = 2^k, k = floor(log2(amax)) - 8 (8 = E4M3's largest normal
  exponent: 448 = 1.75 * 2^8), clamped to the E8M0 range [-127, 127]; a block of zeros gets k = -127;
- each element is v / X (exact: X is a power of two) rounded to nearest even in E4M3, saturating at
  +-448 (v / X < 512 always, so only [448, 512) saturates);
- a block holding any NaN or +-Inf gets the NaN scale (0xFF) and NaN elements (0x7F): the block is
  poisoned, not silently clipped; dequantize gives NaN for all 32.
The device kernels (hipsrc/kosmos/mx/quant.h) reproduce this bit for bit (tests/test_mx.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import bfloat16, float8_e4m3, float8_e8m0, float32
from .runtime.streams import uses_stream

BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8        # largest normal exponent of E4M3
SCALE_NAN = 0xFF     # E8M0 NaN
ELEMENT_NAN = 0x7F   # E4M3 (fn) NaN, positive


@dataclass(frozen=True)
class MXTensor:
    data: np.ndarray    # float8_e4m3fn, the source's shape
    scales: np.ndarray  # float8_e8m0fnu, the source's shape with `axis` / 32
    axis: int           # the blocked axis (non-negative)


def _blocks(x: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
    """x as float32 with the blocked axis last, split into [..., n_blocks, 32]; and the axis."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("quantize needs an array with at least one axis")
    axis = axis % x.ndim
    if x.shape[axis] % BLOCK:
        raise ValueError(f"axis {axis} has {x.shape[axis]} elements: MX blocks need a multiple of {BLOCK}")
    if x.dtype not in (float32, bfloat16):
        raise TypeError(f"quantize takes float32 or bfloat16, got {x.dtype}")
    v = np.moveaxis(x.astype(np.float32), axis, -1)
    return v.reshape(*v.shape[:-1], v.shape[-1] // BLOCK, BLOCK), axis


def scale_exponents(blocks: np.ndarray) -> np.ndarray:
    """k per block (int32), or 128 for a block with a NaN or an Inf (its scale is E8M0 NaN)."""
    finite = np.isfinite(blocks).all(axis=-1)
    amax = np.where(np.isfinite(blocks), np.abs(blocks), 0).max(axis=-1)
    _, e = np.frexp(amax)  # amax = f * 2^e with f in [0.5, 1): floor(log2 amax) = e - 1 (exact, subnormals too)
    k = np.where(amax > 0, e.astype(np.int32) - 1 - E4M3_EMAX, -127)
    return np.where(finite, np.clip(k, -127, 127), 128).astype(np.int32)


def quantize(x: np.ndarray, axis: int = -1) -> MXTensor:
    blocks, axis = _blocks(x, axis)
    k = scale_exponents(blocks)
    poisoned = k == 128
    scaled = blocks * np.ldexp(np.float32(1.0), -np.where(poisoned, 0, k))[..., None].astype(np.float32)
    elems = np.clip(np.where(poisoned[..., None], 0, scaled), -E4M3_MAX, E4M3_MAX).astype(float8_e4m3)
    elems = np.where(poisoned[..., None], np.uint8(ELEMENT_NAN), elems.view(np.uint8)).astype(np.uint8)
    scales = np.where(poisoned, SCALE_NAN, k + 127).astype(np.uint8)
    data = np.moveaxis(elems.reshape(*elems.shape[:-2], -1), -1, axis)
    return MXTensor(np.ascontiguousarray(data).view(float8_e4m3), np.moveaxis(scales, -1, axis).copy().view(
        float8_e8m0), axis)


def dequantize(t: MXTensor) -> np.ndarray:
    """float32: each element times its block's 2^k (exact in float32 wherever the product is normal)."""
    data = np.moveaxis(t.data.astype(np.float32), t.axis, -1)
    codes = np.moveaxis(t.scales.view(np.uint8), t.axis, -1).astype(np.int32)
    blocks = data.reshape(*data.shape[:-1], -1, BLOCK)
    k = codes - 127
    out = np.ldexp(blocks.astype(np.float64), k[..., None])  # float64: 448 * 2^127 stays finite until the cast
    out = np.where((codes == SCALE_NAN)[..., None], np.nan, out).astype(np.float32)
    return np.moveaxis(out.reshape(*out.shape[:-2], -1), -1, t.axis)


# ---------------------------------------------------------------- the device kernel
@dataclass(frozen=True)
class DeviceMX:
    """An MXFP8 tensor on the GPU: raw codes (uint8 CuPy arrays; view them as float8_e4m3fn /
    float8_e8m0fnu with .view once CuPy knows those dtypes)."""
    data: object    # uint8 [rows, cols]
    scales: object  # uint8 [rows, cols / 32] (axis=-1) or [rows / 32, cols] (axis=0)
    axis: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


def scales_shape(rows: int, cols: int, axis: int) -> tuple[int, int]:
    """The E8M0 scales' shape of a [rows, cols] MXFP8 matrix with blocks along `axis` (1 or -1: a
    row's 32 consecutive elements, 0: a column's)."""
    return (rows, cols // BLOCK) if axis % 2 == 1 else (rows // BLOCK, cols)


def empty_mx(rows: int, cols: int, axis: int) -> DeviceMX:
    """An uninitialised [rows, cols] DeviceMX on the current GPU, blocks along `axis` (1 or 0)."""
    import cupy

    return DeviceMX(cupy.empty((rows, cols), np.uint8), cupy.empty(scales_shape(rows, cols, axis), np.uint8), axis % 2)


def to_device(t: MXTensor) -> DeviceMX:
    """A NumPy MXTensor (quantize's result) on the current GPU, as a DeviceMX (2-D)."""
    import cupy

    if t.data.ndim != 2:
        raise ValueError(f"to_device takes a 2-D MXTensor, got shape {t.data.shape}")
    return DeviceMX(cupy.asarray(t.data.view(np.uint8)), cupy.asarray(t.scales.view(np.uint8)), t.axis % 2)


@uses_stream
def quantize_both(x, stream=None, *, transpose_columns: bool = False) -> tuple[DeviceMX, DeviceMX]:
    """The row-wise (blocks along a row) and column-wise (blocks along a column) MXFP8 copies of a bf16
    CuPy matrix, both from x itself, in one kernel pass (hipsrc/mx.hip); rows and cols multiples of 32.

    transpose_columns=True stores the column-wise copy transposed: the row-wise copy of x^T ([cols,
    rows], axis 1; the same codes and scales). A wgrad dW = dY^T X on such copies of dY and X is then
    matmul(dy_t, x_t, "TN"), whose MXFP8 A Hopper dequantizes in the mainloop (an NT GEMM's MN-major
    MXFP8 operands are dequantized over HBM first). The fused TP ops gather the untransposed form."""
    import cupy

    from .arrays import check_array
    from .runtime.module import load_module

    x = check_array(x, "x", dtypes=(bfloat16,), device=cupy.cuda.Device().id, stream=stream)
    if x.ndim != 2 or x.shape[0] % BLOCK or x.shape[1] % BLOCK or x.size == 0:
        raise ValueError(f"x must be a non-empty [rows, cols] matrix with both multiples of {BLOCK}, "
                         f"got {tuple(x.shape)}")
    rows, cols = x.shape
    row = empty_mx(rows, cols, 1)
    col = empty_mx(cols, rows, 1) if transpose_columns else empty_mx(rows, cols, 0)
    kernel = load_module("mx.hip").get_function("kosmos_mx_quantize_bf16")
    strips = -(-cols // 256)  # the kernel's 32 x 256 tiles (hipsrc/mx.hip kStrip)
    kernel(((rows // BLOCK) * strips,), (256,), (x, np.int64(rows), np.int64(cols), row.data, row.scales,
                                                  col.data, col.scales, np.int32(transpose_columns)))
    return row, col


def check_mx(t: Any, name: str, shape: tuple[int, int] | None = None, axis: int | None = None,
             stream: Any = None, *, writable: bool = False) -> DeviceMX:
    """t checked as this GPU's MXFP8 matrix: uint8 data [rows, cols] (both multiples of 32, or of
    `shape` when given), its scales in the shape its axis fixes, blocks along `axis` when given (the
    GEMM's contracting axis: 1 for blocks along a row, 0 along a column); writable: an output."""
    import cupy

    from .arrays import check_array

    if not isinstance(t, DeviceMX):
        raise TypeError(f"{name} must be a kosmos.mx.DeviceMX (quantize_both makes them), got {type(t).__name__}")
    dev = cupy.cuda.Device().id
    u8 = (np.dtype(np.uint8),)
    data = check_array(t.data, f"{name}.data", dtypes=u8, device=dev, stream=stream, writable=writable)
    scales = check_array(t.scales, f"{name}.scales", dtypes=u8, device=dev, stream=stream, writable=writable)
    along = t.axis % 2 if t.axis in (0, 1, -1) else None
    if data.ndim != 2 or data.shape[0] % BLOCK or data.shape[1] % BLOCK or along is None:
        raise ValueError(f"{name}.data must be [rows, cols] with both multiples of {BLOCK} and {name}.axis 0 or 1, "
                         f"got {tuple(data.shape)}, axis {t.axis}")
    if shape is not None and tuple(data.shape) != tuple(shape):
        raise ValueError(f"{name} must be {tuple(shape)}, got {tuple(data.shape)}")
    if axis is not None and along != axis % 2:
        what = {1: "along its rows (axis 1)", 0: "along its columns (axis 0)"}
        raise ValueError(f"{name} must have its MX blocks {what[axis % 2]}, the GEMM's contracting axis; "
                         f"it has them {what[along]}: quantize it the other way (quantize_both gives both)")
    want = scales_shape(*data.shape, along)
    if scales.shape != want:
        raise ValueError(f"{name}.scales must be {want} for blocks along axis {along}, got {tuple(scales.shape)}")
    return DeviceMX(data, scales, along)


def _bf16_out(out: Any, shape: tuple[int, int], stream: Any, **inputs: Any) -> Any:
    """A kernel's bf16 output: allocated when None, else checked (the GEMM's rule: device, dtype,
    shape, no overlap with an input)."""
    from . import gemm

    return gemm.output_array(out, shape, bfloat16, stream=stream, **inputs)


def blocks_code(t: DeviceMX) -> int:
    """The kernels' Blocks enum (hipsrc/kosmos/mx/dequant.h): 1 blocks along rows, 2 along columns."""
    return 1 if t.axis % 2 == 1 else 2


@uses_stream
def dequantize_device(t: DeviceMX, out: Any = None, stream: Any = None):
    """bf16 CuPy [rows, cols] from a DeviceMX (hipsrc/kosmos/mx/dequant.h), into `out` when given:
    each element times its block's scale, rounded once to bf16; bit for bit
    dequantize(...).astype(bfloat16)."""
    from .runtime.launch import sm_count
    from .runtime.module import load_module

    t = check_mx(t, "t", stream=stream)
    rows, cols = t.data.shape
    out = _bf16_out(out, (rows, cols), stream, data=t.data, scales=t.scales)
    if out.size == 0:
        return out
    # CTAs take contiguous row ranges (grid_dequant_rows): 8 a SM at most, each share < 2^32 vectors
    grid = max(min(rows, 8 * sm_count()), -(-rows * cols // (16 * 2**31)))
    load_module("mx.hip").get_function("kosmos_mx_dequantize_bf16")(
        (grid,), (256,), (t.data, t.scales, np.int64(rows), np.int64(cols), np.int32(blocks_code(t)), out))
    return out


# ---------------------------------------------------------------- the MXFP8-A GEMM's B operand
K_SLAB = 64  # the GEMM's reduction slab (hipsrc/kosmos/gemm/config.h kTileK)


def k_permutation() -> np.ndarray:
    """int64[64]: for each logical reduction index L of a slab, the natural index the MXFP8-A GEMM
    (hipsrc/kosmos/gemm/builder_wgmma.h, TileConfig MxA) computes there. A consumer thread holds 16
    consecutive codes 16 q .. 16 q + 15 of an A row (q = lane % 4) and gives wgmma step kk codes
    4 kk .. 4 kk + 3 as columns 2q, 2q + 1, 2q + 8, 2q + 9 of the step's 16: natural
    16 q + 4 kk + 2 h + b sits at L = 16 kk + 8 h + 2 q + b. B's rows are stored in that order
    (kperm_operand), so the GEMM is the GEMM of the same operands, summed in another order."""
    L = np.arange(K_SLAB)
    kk, h, q, b = L // 16, (L % 16) // 8, (L % 8) // 2, L % 2
    return 16 * q + 4 * kk + 2 * h + b


def permute_k(x: np.ndarray, axis: int) -> np.ndarray:
    """x with its axis `axis` zero-padded to whole slabs of 64 and permuted within each as
    k_permutation says (NumPy; the reference of kperm_operand)."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    k = x.shape[-1]
    pad = -k % K_SLAB
    x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1)
    idx = (np.arange(0, k + pad, K_SLAB)[:, None] + k_permutation()[None]).reshape(-1)
    return np.ascontiguousarray(np.moveaxis(x[..., idx], -1, axis))


@uses_stream
def kperm_operand(b: Any, axis: int, stream: Any = None):
    """B of the MXFP8-A GEMM (bf16 CuPy): b's reduction axis `axis` (1: B is [N, K], TN; 0: B is
    [K, N], NN) zero-padded to whole 64-slabs and permuted within each (k_permutation), one kernel
    (hipsrc/mx.hip kosmos_mx_kperm_bf16). b: a DeviceMX with its blocks along `axis` (dequantized
    exactly on the way) or a bf16 CuPy matrix."""
    import cupy

    from .arrays import check_array
    from .runtime.module import load_module

    if isinstance(b, DeviceMX):
        b = check_mx(b, "b", axis=axis, stream=stream)
        data, scales, blocks = b.data, b.scales, blocks_code(b)
    else:
        data = check_array(b, "b", dtypes=(bfloat16,), device=cupy.cuda.Device().id, stream=stream)
        if data.ndim != 2:
            raise ValueError(f"b must be a 2-D matrix, got shape {tuple(data.shape)}")
        scales, blocks = data, 0
    rows, cols = data.shape
    if cols % 8:
        raise ValueError(f"b's rows must be whole 16-byte vectors (columns a multiple of 8), got {cols} columns")
    shape = (-(-rows // K_SLAB) * K_SLAB, cols) if axis == 0 else (rows, -(-cols // K_SLAB) * K_SLAB)
    out = cupy.empty(shape, dtype=bfloat16)
    vecs = shape[0] * shape[1] // 8
    grid = max(1, min(-(-vecs // 256), 65535))
    load_module("mx.hip").get_function("kosmos_mx_kperm_bf16")(
        (grid,), (256,), (data, scales, np.int64(rows), np.int64(cols), np.int32(blocks), np.int32(axis == 0), out))
    return out


# ---------------------------------------------------------------- CDNA4's native path
_native: dict[int, bool] = {}


def scaled_mfma_available() -> bool:
    """True on a GPU whose compile has CDNA4's block-scaled MFMA (gfx950: MI350X / MI355X)."""
    import cupy

    from .runtime.module import load_module

    dev = cupy.cuda.Device().id
    if dev not in _native:
        out = cupy.zeros(1, np.int32)
        load_module("mx.hip").get_function("kosmos_mx_native")((1,), (1,), (out,))
        _native[dev] = bool(int(out.get()[0]))
    return _native[dev]


@uses_stream
def matmul_scaled_mfma(a: DeviceMX, b: DeviceMX, out: Any = None, stream: Any = None):
    """C[m, n] (bf16) = A[m, k] B[n, k]^T on MXFP8 operands (blocks along k) through gfx950's
    v_mfma_scale_f32_32x32x64_f8f6f4: the scales applied by the MFMA, no dequantization.

    Experimental: the operand layout it assumes (hipsrc/kosmos/mx/mfma_scale.h) has not run on
    hardware yet (no AMD GPU where it was written); tests/gpu/test_mx.py checks it on a gfx950.
    A correctness-first kernel (no LDS, no pipeline), not the fused kernels' path."""
    from .runtime.module import load_module

    if not scaled_mfma_available():
        raise RuntimeError("matmul_scaled_mfma needs a gfx950 GPU (CDNA4's block-scaled MFMA); "
                           "kosmos.matmul runs MXFP8 operands everywhere (dequantized to bf16)")
    a, b = check_mx(a, "a", axis=1, stream=stream), check_mx(b, "b", axis=1, stream=stream)
    (m, k), (n, kb) = a.data.shape, b.data.shape
    if kb != k or k % 64:
        raise ValueError(f"a [m, k] and b [n, k] need the same k, a multiple of 64; got {a.shape} and {b.shape}")
    out = _bf16_out(out, (m, n), stream, a=a.data, a_scales=a.scales, b=b.data, b_scales=b.scales)
    if m and n:
        grid = -(-m // 128) * -(-n // 128)
        load_module("mx.hip").get_function("kosmos_mx_gemm_tn")(
            (grid,), (256,), (a.data, a.scales, b.data, b.scales, np.int64(m), np.int64(n), np.int64(k), out))
    return out
