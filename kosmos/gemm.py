"""The standalone persistent GEMM: ``matmul(a, b, layout="TN")`` on the builder tile of hipsrc/kosmos/gemm.

Layouts, in row-major NumPy terms (named BLAS-style as in the paper):

    TN  Y[M,N]  = X[M,K] @ W[N,K]^T     matmul(X, W, "TN")   (fprop)
    NN  dX[M,K] = dY[M,N] @ W[N,K]      matmul(dY, W, "NN")  (dgrad)
    NT  dW[N,K] = dY[M,N]^T @ X[M,K]    matmul(dY, X, "NT")  (wgrad)

Inputs are C-contiguous ``ml_dtypes.bfloat16`` CuPy arrays; accumulation is fp32; the output is
bf16 (default) or float32. M (the first dimension of ``a``) may be anything; N and K must be
multiples of 64. ``epilogue="swiglu"`` (TN only): ``b`` holds [gate; up] rows (2F of them) and the
output is ``silu(X Wg^T) * (X Wu^T)``, [M, F] bf16; ``gate_up`` (optional, [M, 2F] bf16) receives
the pre-activations [X Wg^T, X Wu^T] the backward needs. ``epilogue="swiglu_backward"`` (NN only):
the GEMM computes dA = dY W2 ([M, F]) and its epilogue the SwiGLU backward from the forward's kept
``gate_up`` (required): the output is [dGate, dUp], [M, 2F] bf16, from dA's fp32 accumulators.
``epilogue="accumulate"`` (any layout): ``out`` (float32, required) += the product, one fp32 add per
element (a gradient accumulated into fp32 main grads, a residual added); on Hopper the TMA unit adds
each tile in L2 (no load in the epilogue); whole 128 x 256 tiles, no split-K or stream-K.

One CTA per SM (or ``sm_cap`` of them), each claiming 128x256 (or, for grids of few tiles on
Hopper, 128x192 or 128x128) output tiles from an atomic queue in device memory until it is empty; on Hopper a
grid of a few waves whose last wave is short and whose reduction is long has its last tiles cut into
K-ranges (stream-K, choose_stream_k). Plans (compiled kernel, queue counter, launch check, TMA
descriptors, stream-K workspace) are cached per shape.
"""
from __future__ import annotations

import functools
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrays import as_cupy, check_array, refuse_overlap
from .dtypes import dtype_name
from .runtime.call_cache import CallCache, call_signature, remember
from .runtime.streams import DeviceOrder, device_order, uses_stream

LAYOUTS = ("TN", "NN", "NT")
EPILOGUES = ("store", "swiglu", "swiglu_backward", "accumulate")
STORE_EPILOGUES = ("store", "accumulate")  # the output's layout is the accumulator's (Problem no, EPI_DTYPE)
_LAYOUT_ID = {"TN": 0, "NN": 1, "NT": 2}


# ---------------------------------------------------------------- constants of the device code
# The builder geometry of hipsrc/kosmos/gemm/config.h and schedule.h that the host relies on (the
# header is the source; this mirror is checked against it at compile time: kosmos.runtime.mirror).
DEVICE_CONSTANTS = {
    "kThreads": 384,       # one producer warpgroup + two consumer warpgroups
    "kTileM": 128, "kTileN": 256, "kTileK": 64,  # the default tile (TILE_WIDTHS has the narrow ones)
    # dynamic shared memory of a builder CTA: the Hopper layer's, the portable layers' (mma.sync, MFMA)
    "kSmemBytesHopper": 230656, "kSmemBytesPortable": 57344,
    "kGroupM": 8,          # tile raster: tile rows per group
    "kMaxGroups": 256,     # grouped GEMM: groups the device-side table holds
    "kStreamKPartialBytes": 131072,  # stream-K: one K-range's fp32 partial of a 128 x 256 tile
}


def device_constants() -> dict[str, int]:
    return DEVICE_CONSTANTS


def block_threads() -> int:
    """Threads per CTA of every builder (and of movers that share its grid)."""
    return device_constants()["kThreads"]


def shared_mem_bytes() -> int:
    """Dynamic shared memory a builder CTA (and any fused kernel's CTA) needs on this device's layer."""
    c = device_constants()
    return c["kSmemBytesHopper"] if arch_path() == "wgmma" else c["kSmemBytesPortable"]


def tile_shape() -> tuple[int, int, int]:
    c = device_constants()
    return c["kTileM"], c["kTileN"], c["kTileK"]


# ---------------------------------------------------------------- host logic (no GPU needed)
@dataclass(frozen=True)
class GemmShape:
    layout: str
    mo: int  # output rows
    no: int  # output columns (accumulator columns; 2F under SwiGLU)
    kr: int  # reduction depth
    out_shape: tuple[int, int]
    swiglu_f: int = 0  # SwiGLU forward: gate columns (b's gate and up rows are read in pairs)
    epilogue: str = "store"

    @property
    def flops(self) -> int:
        return 2 * self.mo * self.no * self.kr


def _dim_error(what: str, value: int) -> ValueError:
    return ValueError(f"{what} = {value} must be a positive multiple of 64")


def gemm_shape(layout: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...], epilogue: str = "store") -> GemmShape:
    """Check a layout's operand shapes and return the GEMM's (Mo, No, Kr) and output shape."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"a and b must be 2-D, got shapes {tuple(a_shape)} and {tuple(b_shape)}")
    (a0, a1), (b0, b1) = a_shape, b_shape
    if a0 < 1:
        raise ValueError(f"M = {a0} must be at least 1")
    if layout == "TN":  # Y[M,N] = X[M,K] @ W[N,K]^T
        m, k, n = a0, a1, b0
        if b1 != k:
            raise ValueError(f"TN needs a[M,K] and b[N,K] with the same K; got {tuple(a_shape)} and {tuple(b_shape)}")
        shape = (m, n, k)
    elif layout == "NN":  # dX[M,K] = dY[M,N] @ W[N,K]
        m, n, k = a0, a1, b1
        if b0 != n:
            raise ValueError(f"NN needs a[M,N] and b[N,K] with the same N; got {tuple(a_shape)} and {tuple(b_shape)}")
        shape = (m, k, n)
    else:  # NT: dW[N,K] = dY[M,N]^T @ X[M,K]
        m, n, k = a0, a1, b1
        if b0 != m:
            raise ValueError(f"NT needs a[M,N] and b[M,K] with the same M; got {tuple(a_shape)} and {tuple(b_shape)}")
        shape = (n, k, m)
    if n < 64 or n % 64:
        raise _dim_error("N", n)
    if k < 64 or k % 64:
        raise _dim_error("K", k)
    mo, no, kr = shape
    cols, f = epilogue_columns(layout, epilogue, no)
    return GemmShape(layout, mo, no, kr, (mo, cols), swiglu_f=f, epilogue=epilogue)


def epilogue_columns(layout: str, epilogue: str, no: int, per: str = "") -> tuple[int, int]:
    """(output columns, swiglu_f) of `epilogue` over `no` accumulator columns: the SwiGLU forward
    halves them (gate and up pairs), its backward doubles them ([d gate, d up]); each refuses a
    layout it does not take. `per`: how b's rows are counted in the message (" per group")."""
    if epilogue == "swiglu":
        if layout != "TN":
            raise ValueError("epilogue='swiglu' is a forward (TN) epilogue")
        if no % 128:
            raise ValueError(f"swiglu needs b with 2F rows{per}, F a multiple of 64; got {no} rows")
        return no // 2, no // 2
    if epilogue == "swiglu_backward":
        if layout != "NN":
            raise ValueError("epilogue='swiglu_backward' is a dgrad (NN) epilogue")
        return 2 * no, 0
    return no, 0


def stores_through_tma(epilogue: str, uses_tma: bool) -> bool:
    """The store epilogues (bf16, fp32, split-K's fp32 partials) write through TMA on the Hopper
    layer, so their kernels read the output's map; the SwiGLU epilogues store from registers."""
    return uses_tma and epilogue in STORE_EPILOGUES


# The standalone GEMM's tile configurations (config.h TileConfig): 128 x BN. With bf16 operands the
# 128-wide one is ping-pong (config.h PingPongTile: a consumer warpgroup a tile, one's epilogue under
# the other's mainloop), in the fused TP kernels too; MXFP8 operands keep the cooperative 128 x 128.
TILE_WIDTHS = (256, 192, 128)


def tile_columns(no: int, swiglu_f: int, tile_n: int) -> int:
    """Tile columns over `no` accumulator columns (SwiGLU: over its f outputs, tile_n / 2 a tile)."""
    if swiglu_f:
        return -(-swiglu_f // (tile_n // 2))
    return -(-no // tile_n)


def tile_counts(shape: GemmShape, tile_n: int = 256) -> tuple[int, int, int]:
    """(tiles_m, tiles_n, k_slabs) of the 128 x tile_n x 64 builder on this GEMM."""
    tm, _, tk = tile_shape()
    return -(-shape.mo // tm), tile_columns(shape.no, shape.swiglu_f, tile_n), -(-shape.kr // tk)


# Per-FLOP speed of each tile width relative to 128 x 256 (narrower tiles reuse each operand byte
# less): the chooser's constants. Measured on the H200 with every width forced (bench/gemm.py
# w256 / w192 / w128, medians over the shapes of more than 1,000 tiles): 192 0.965 (session 14,
# 96 shapes), 128 0.79-0.87 (sessions 4-14, cooperative; notes/gemm.md). The ping-pong 128 that
# replaced it: 0.813 (H100, session 37, 96 shapes; notes/debug/chooser_check.py's fit), so 0.82
# stays until an H200 run says otherwise; 192 fits 0.983 on the H200 (session 32), 0.931 on the H100.
TILE_EFFICIENCY = {256: 1.0, 192: 0.965, 128: 0.82}


def whole_tile_seconds(tiles: int, ctas: int, k_slabs: int, tile_n: int = 256) -> float:
    """The wave model of a grid of whole tiles: every tile of a width costs the same, so the grid
    takes ceil(tiles / ctas) of them in turn, each k_slabs slabs of 128 x tile_n at
    TILE_EFFICIENCY[tile_n] of the 256-wide tile's speed per FLOP."""
    return -(-tiles // ctas) * k_slabs * SLAB_SECONDS * (tile_n / 256) / TILE_EFFICIENCY[tile_n]


def choose_tile_n(tiles: dict[int, int], ctas: int) -> int:
    """The tile width for a persistent grid of `ctas`, among the keys of `tiles` (width -> tile
    count; 256 must be one): the one whose whole waves cost least, a narrower one only when it
    beats 256 by 5 % (whole_tile_seconds)."""
    cost = {w: whole_tile_seconds(n, ctas, 1, w) for w, n in tiles.items()}
    best = min(cost, key=cost.get)
    return best if cost[best] < 0.95 * cost[256] else 256


def check_tile_n(tile_n: int | None, epilogue: str, wgmma: bool, widths: tuple[int, ...] = TILE_WIDTHS) -> None:
    if tile_n is None:
        return
    if tile_n not in widths:
        raise ValueError(f"tile_n must be one of {widths} or None (automatic), got {tile_n!r}")
    if tile_n != 256 and (epilogue != "store" or not wgmma):
        raise ValueError(f"tile_n={tile_n} is a Hopper (wgmma) tile for the store epilogues; "
                         + (f"epilogue={epilogue!r} runs 256-wide tiles" if epilogue != "store"
                            else "this GPU's layer builds 256-wide tiles"))


def grid_size(ntiles: int, sms: int, sm_cap: int | None) -> int:
    """CTAs of the persistent grid: one per SM, or sm_cap of them; never more than there are tiles."""
    if sm_cap is not None:
        if not isinstance(sm_cap, (int, np.integer)) or sm_cap < 1:
            raise ValueError(f"sm_cap must be a positive integer, got {sm_cap!r}")
        sms = min(sms, int(sm_cap))
    return max(1, min(sms, ntiles))


# The wave model behind choose_split_k: one 128x256x64 slab takes about this long on one SM (H200,
# ~650 TFLOP/s over 132 SMs), and the split-K reduction streams its bytes at about this rate.
SLAB_SECONDS = 0.85e-6
REDUCE_BYTES_PER_S = 3.0e12
MIN_SLABS_PER_SPLIT = 32


def leaves_empty_k_range(split_k: int, k_slabs: int) -> bool:
    """Whether cutting k_slabs into split_k ranges of ceil(k_slabs / split_k) leaves the last empty."""
    return (split_k - 1) * -(-k_slabs // split_k) >= k_slabs


def check_split_k(split_k: int, k_slabs: int) -> int:
    """Validate an explicit split-K factor: every K-range gets at least one 64-deep slab."""
    if not isinstance(split_k, (int, np.integer)) or split_k < 1:
        raise ValueError(f"split_k must be a positive integer or None (automatic), got {split_k!r}")
    if leaves_empty_k_range(split_k, k_slabs):
        raise ValueError(f"split_k = {split_k} leaves empty K-ranges: the reduction has only {k_slabs} slabs of 64")
    return int(split_k)


def choose_split_k(ntiles: int, grid: int, k_slabs: int, out_elems: int) -> int:
    """Split-K factor for a grid that the output tiles alone would leave partly idle.

    Only when there are fewer tiles than CTAs (SMs idle for the whole kernel): measured on the H200,
    splitting 320 tiles over 132 SMs by 2 (the model's pick for a 2.4-wave grid) lost 1-8% to the
    fp32 partial traffic, so grids of a wave or more are left alone. Wave model: time = waves *
    slabs per unit * SLAB_SECONDS + the reduction's bytes (each split's fp32 partial written and
    read, the output written) / REDUCE_BYTES_PER_S. Each unit keeps at least MIN_SLABS_PER_SPLIT
    slabs; a split must win by 15%.
    """
    if ntiles >= grid:
        return 1
    def cost(sk: int) -> float:
        waves = -(-ntiles * sk // grid)
        t = waves * (-(-k_slabs // sk)) * SLAB_SECONDS
        if sk > 1:
            t += (8 * sk + 2) * out_elems / REDUCE_BYTES_PER_S
        return t

    best, best_t = 1, cost(1)
    for sk in (2, 3, 4, 6, 8):
        if k_slabs < MIN_SLABS_PER_SPLIT * sk:
            break
        t = cost(sk)
        if t < 0.85 * best_t:
            best, best_t = sk, t
    return best


# ---- stream-K: the raster's last tiles cut into K-ranges, fixed up in the kernel (schedule.h StreamK)
# Each range of a tail tile but its last writes a 128 x 256 fp32 partial that the last range's CTA
# reads back: their bytes, against the wave model's idle SMs.
PARTIAL_BYTES = DEVICE_CONSTANTS["kStreamKPartialBytes"]
MIN_SLABS_PER_RANGE = 8
MAX_RANGES = 4
# A split whose units all run at once (one round) hides none of its fix-ups: measured 0.37-0.39
# slab-times a partial on the H200 (session 32) and 0.53-0.57 on the H100 (sessions 36-37), at
# 256 x 8192 x 8192 TN and NN, against the 0.10 of the bandwidth term on grids of several rounds
# (notes/debug/chooser_check.py's fit, notes/gemm.md session 37). Only choose_stream_k charges it:
# stream_k_split's bandwidth term ranks a grid's splits as measured (there 2 ranges in one round
# 531.6 TF/s, 4 in two rounds 425.9, H100), which this charge alone would invert.
ONE_ROUND_PARTIAL_SLABS = 0.4


@dataclass(frozen=True)
class StreamKSplit:
    """`full` whole tiles, then `tail` tiles of `k_slabs` slabs cut into `ranges` K-ranges of `per`."""

    full: int
    tail: int
    ranges: int
    k_slabs: int

    @property
    def per(self) -> int:
        return -(-self.k_slabs // self.ranges)

    @property
    def units(self) -> int:
        return self.full + self.tail * self.ranges

    def unit(self, u: int) -> tuple[int, int, int, int]:
        """Queue position u as the device places it: (raster tile, kb0, kb1, range or -1 whole)."""
        if u < self.full:
            return u, 0, self.k_slabs, -1
        r, j = divmod(u - self.full, self.tail)
        return self.full + j, r * self.per, min(r * self.per + self.per, self.k_slabs), r

    @property
    def partials(self) -> int:
        return self.tail * (self.ranges - 1)

    def seconds(self, ctas: int) -> float:
        """The wave model: whole-tile waves, the ranges' waves, the partials' round trip. (It ranks
        the splits of a grid against each other; against whole tiles, choose_stream_k also charges a
        one-round split's exposed fix-ups.)"""
        t = self.full // ctas * self.k_slabs * SLAB_SECONDS
        t += -(-self.tail * self.ranges // ctas) * self.per * SLAB_SECONDS
        return t + 2 * self.partials * PARTIAL_BYTES / REDUCE_BYTES_PER_S


def stream_k_split(ntiles: int, ctas: int, k_slabs: int) -> StreamKSplit | None:
    """Whole waves of tiles, then the rest cut into K-ranges (2 to 4, each at least
    MIN_SLABS_PER_RANGE deep): the last one to two waves' worth, or only the last partial wave
    (fewer fp32 partials for the same waves where its ranges fill the grid), whichever the wave
    model likes best; None when no cut is possible."""
    waves = ntiles // ctas
    best = None
    fulls = {max(0, (waves - 1) * ctas)} | ({waves * ctas} if ntiles % ctas else set())
    for full in sorted(fulls):
        for ranges in range(2, MAX_RANGES + 1):
            split = StreamKSplit(full, ntiles - full, ranges, k_slabs)
            if k_slabs - (ranges - 1) * split.per < MIN_SLABS_PER_RANGE:  # the last range, the shortest
                continue
            if best is None or split.seconds(ctas) < best.seconds(ctas):
                best = split
    return best


# Stream-K is taken when the wave model says it beats the best whole-tile grid by this margin. The
# model tracks the H200 within ~5 % on all 146 shapes of bench/gemm.py --set both (session 14,
# notes/gemm.md): every shape it gives a 5 % gain measured 2-19 % faster, none slower.
STREAM_K_MARGIN = 0.95


def choose_stream_k(tiles: dict[int, int], ctas: int, k_slabs: int) -> bool:
    """Whether stream-K on 128 x 256 tiles beats the best grid of whole tiles (`tiles`: width ->
    tile count, the widths allowed; 256 must be one) by STREAM_K_MARGIN in the wave model."""
    split = stream_k_split(tiles[256], ctas, k_slabs)
    if split is None or tiles[256] % ctas == 0:
        return False
    whole = min(whole_tile_seconds(n, ctas, k_slabs, w) for w, n in tiles.items())
    t = split.seconds(ctas)
    if split.units <= ctas:  # one round: each finisher waits out its partials (ONE_ROUND_PARTIAL_SLABS)
        t = max(t, split.per * SLAB_SECONDS + split.partials * ONE_ROUND_PARTIAL_SLABS * SLAB_SECONDS)
    return t < STREAM_K_MARGIN * whole


def choose_tiling(shape: GemmShape, ctas: int, widths: tuple[int, ...],
                  stream_k_ok: bool) -> tuple[int, StreamKSplit | None]:
    """The automatic tiling of a grid of `ctas` builders: (256, the split) where stream_k_ok and
    choose_stream_k takes stream-K, else (choose_tile_n's width among `widths`, None). The plain
    GEMM (get_plan) and the fused ops (kosmos/tp/ops.py) choose alike."""
    counts = {w: math.prod(tile_counts(shape, w)[:2]) for w in widths}
    if stream_k_ok:
        k_slabs = tile_counts(shape, 256)[2]
        if choose_stream_k(counts, ctas, k_slabs):
            return 256, stream_k_split(counts[256], ctas, k_slabs)
    return choose_tile_n(counts, ctas), None


def tile_order(shape: GemmShape, tile_n: int = 256) -> list[tuple[int, int]]:
    """Queue index -> (tile row, tile column): the device's DenseSchedule, for tests and tools."""
    tiles_m, tiles_n, _ = tile_counts(shape, tile_n)
    g = device_constants()["kGroupM"]
    out = []
    for t in range(tiles_m * tiles_n):
        grp, r = divmod(t, g * tiles_n)
        first = grp * g
        rows = min(g, tiles_m - first)
        out.append((first + r % rows, r // rows))
    return out


PROBLEM_DTYPE = np.dtype(
    [("a", np.uint64), ("b", np.uint64), ("mo", np.int32), ("no", np.int32), ("kr", np.int32), ("lda", np.int32),
     ("ldb", np.int32), ("tiles_m", np.int32), ("tiles_n", np.int32), ("k_slabs", np.int32), ("swiglu_f", np.int32),
     ("k_splits", np.int32), ("b_group_stride", np.int64), ("a_scales", np.uint64), ("b_scales", np.uint64)],
    align=True,
)
EPI_DTYPE = np.dtype([("out", np.uint64), ("ldo", np.int32), ("mo", np.int32), ("no", np.int32)], align=True)
STREAM_K_DTYPE = np.dtype([("ws", np.uint64), ("arrived", np.uint64), ("full", np.int32), ("tail", np.int32),
                           ("ranges", np.int32)], align=True)
# EpiSwiGLU / EpiSwiGLUBackward: f output (or dA) columns, pre = the [gate, up] pre-activations
SWIGLU_EPI_DTYPE = np.dtype([("out", np.uint64), ("ldo", np.int32), ("mo", np.int32), ("f", np.int32),
                             ("pre", np.uint64)], align=True)
TMAP_DTYPE = np.dtype([("words", np.uint64, (16,))], align=True)


def job_record_dtype(epi: np.dtype) -> np.dtype:
    """gemm::JobRecord<Epi> (job.h): the a, b and out maps, the Problem and the epilogue record of a
    job read from global memory; 64-byte aligned (the maps'), so records stack whole."""
    align = lambda n, a: -(-n // a) * a  # noqa: E731
    fields = [("a", TMAP_DTYPE), ("b", TMAP_DTYPE), ("c", TMAP_DTYPE), ("p", PROBLEM_DTYPE), ("epi", epi)]
    offsets, at = [], 0
    for _, dt in fields:
        at = align(at, 64 if dt is TMAP_DTYPE else dt.alignment)
        offsets.append(at)
        at += dt.itemsize
    return np.dtype({"names": [n for n, _ in fields], "formats": [d for _, d in fields], "offsets": offsets,
                     "itemsize": align(at, 64)})


def kernel_name(layout: str, epilogue: str, out_dtype: Any, tile_n: int = 256, stream_k: bool = False,
                mx_a: bool = False, transposed: bool = False, mx_b: bool = False) -> str:
    if epilogue == "swiglu":
        return "kosmos_gemm_tn_swiglu"
    if epilogue == "swiglu_backward":
        return "kosmos_gemm_nn_swiglu_bwd"
    if epilogue == "accumulate":
        return f"kosmos_gemm_{layout.lower()}_f32_acc"
    suffix = "f32" if np.dtype(out_dtype) == np.float32 else "bf16"
    mx = "mx2_" if mx_b else "mx_" if mx_a else ""
    return (f"kosmos_gemm_{layout.lower()}_{mx}{suffix}" + ("" if tile_n == 256 else f"_n{tile_n}")
            + ("_sk" if stream_k else "") + ("_t" if transposed else ""))


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def resolve_out_dtype(out_dtype: Any, epilogue: str) -> np.dtype:
    bf16 = _bf16()
    dt = bf16 if out_dtype is None else np.dtype(out_dtype)
    if dt not in (bf16, np.dtype(np.float32)):
        raise TypeError(f"out_dtype must be ml_dtypes.bfloat16 or numpy.float32, got {dt}")
    if epilogue == "accumulate":
        if dt != np.dtype(np.float32):
            raise TypeError("epilogue='accumulate' adds into a float32 out")
    elif epilogue != "store" and dt != bf16:
        raise TypeError(f"epilogue={epilogue!r} writes bf16")
    return dt


# ---------------------------------------------------------------- device side
@functools.lru_cache(maxsize=None)
def _arch_info(device_id: int, options: tuple[str, ...] = ()) -> tuple[int, int]:
    """(path, sm90a) the compiled gemm module reports: path 1 wgmma, 2 mma.sync, 3 MFMA."""
    import cupy

    mod = _module()
    out = cupy.zeros(2, dtype=cupy.int32)
    mod.get_function("kosmos_gemm_arch")((1,), (32,), (out,))
    path, sm90a = (int(x) for x in out.get())
    return path, sm90a


def arch_path() -> str:
    """Which matrix-instruction layer the compiled kernels use on the current device."""
    import cupy

    return {1: "wgmma", 2: "mma.sync", 3: "mfma"}[_arch_info(cupy.cuda.Device().id, _extra_options)[0]]


def sm90a_features() -> bool:
    """True when the gemm module was compiled with __CUDA_ARCH_FEAT_SM90_ALL (wgmma available)."""
    import cupy

    return bool(_arch_info(cupy.cuda.Device().id, _extra_options)[1])


# Extra compile options for the gemm module (tests set ("-DKOSMOS_GEMM_FORCE_PORTABLE",) to run the
# mma.sync layer on Hopper); part of every cache key.
_extra_options: tuple[str, ...] = ()


def _module():
    from .runtime.module import load_module

    return load_module("gemm.hip", extra_options=_extra_options)


def encode_tmap(ptr: int, dims: tuple[int, ...], strides_elems: tuple[int, ...], elem_bytes: int = 2,
                box: tuple[int, int] | None = None) -> np.void:
    """A TMA descriptor of bf16 (elem_bytes 2) or fp32 (4) boxes of 64 rows x 128 bytes (64 or 32
    columns; x1... in further dims) with 128-byte swizzle, or of uint8 (1: MXFP8 codes) boxes of
    `box` = (columns, rows) unswizzled; zero fill out of bounds.

    dims: innermost first (columns, rows[, groups]); strides_elems: of every dim but the first."""
    from cuda.bindings import driver as cu

    kind = {1: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
            2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            4: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[elem_bytes]
    swizzled = elem_bytes != 1
    box = box or (128 // elem_bytes, 64)
    res, tm = cu.cuTensorMapEncodeTiled(
        kind,
        len(dims),
        ptr,
        [cu.cuuint64_t(d) for d in dims],
        [cu.cuuint64_t(st * elem_bytes) for st in strides_elems],
        [cu.cuuint32_t(box[0]), cu.cuuint32_t(box[1])] + [cu.cuuint32_t(1)] * (len(dims) - 2),
        [cu.cuuint32_t(1)] * len(dims),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzled else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if res != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {res} (ptr={ptr:#x}, dims={dims}, strides={strides_elems})")
    rec = np.zeros(1, TMAP_DTYPE)
    rec["words"][0] = np.array([int(w) for w in tm.opaque], dtype=np.uint64)
    return rec[0]


def tmap_of(arr) -> np.void:
    """The TMA map of a C-contiguous 2-D or 3-D bf16 or fp32 CuPy array (its dims innermost first)."""
    size = arr.dtype.itemsize
    dims = tuple(int(d) for d in arr.shape[::-1])
    strides = tuple(int(st) // size for st in arr.strides[::-1][1:])
    return encode_tmap(arr.data.ptr, dims, strides, size)


ZERO_TMAP = np.zeros(1, TMAP_DTYPE)[0]


def tmap_of_codes(codes) -> np.void:
    """The TMA map of MXFP8 A's codes (uint8 [rows, cols], C-contiguous): 128 rows x 64 codes a box,
    unswizzled, as the MXFP8-A builder's stage holds them (config.h kStageBytesAMx)."""
    rows, cols = (int(d) for d in codes.shape)
    return encode_tmap(codes.data.ptr, (cols, rows), (cols,), 1, box=(DEVICE_CONSTANTS["kTileK"], DEVICE_CONSTANTS["kTileM"]))


def operand_tmaps(cache: dict, a, b, out, uses_tma: bool, tma_store: bool,
                  mx_a: bool = False) -> tuple[np.void, np.void, np.void]:
    """(a, b, out) TMA maps for a plan, cached by the arrays' addresses (the output's map only when
    the kernel stores through TMA; a 3-D output is mapped as its 2-D rows); zeros off Hopper.
    mx_a: a is MXFP8 A's codes (tmap_of_codes)."""
    if not uses_tma:
        return ZERO_TMAP, ZERO_TMAP, ZERO_TMAP
    key = (*args_key(a, b, out), mx_a)  # a pool reuses addresses
    hit = cache.get(key)
    if hit is None:
        tc = tmap_of(out.reshape(-1, out.shape[-1])) if tma_store else ZERO_TMAP
        hit = (tmap_of_codes(a) if mx_a else tmap_of(a), tmap_of(b), tc)
        remember(cache, key, hit)
    return hit


def args_key(*arrays) -> tuple:
    """A plan's argument records are a function of its arrays' addresses and shapes (the plan fixes
    the rest): their key in the plan's cache (None entries stand for absent arrays)."""
    return tuple(None if x is None else (x.data.ptr, x.shape) for x in arrays)


def problem_record(a, b, mo: int, no: int, kr: int, tiles: tuple[int, int, int], swiglu_f: int = 0,
                   k_splits: int = 0, b_group_stride: int = 0) -> np.void:
    """The device's Problem for row-major operands a and b (b may be [groups, rows, cols])."""
    prob = np.zeros(1, PROBLEM_DTYPE)[0]
    prob["a"], prob["b"] = a.data.ptr, b.data.ptr
    prob["mo"], prob["no"], prob["kr"] = mo, no, kr
    prob["lda"], prob["ldb"] = a.shape[1], b.shape[-1]
    prob["tiles_m"], prob["tiles_n"], prob["k_slabs"] = tiles
    prob["swiglu_f"], prob["k_splits"], prob["b_group_stride"] = swiglu_f, k_splits, b_group_stride
    return prob


def kernel_head(shape: GemmShape, a, b, out, tmaps: dict, uses_tma: bool, gate_up=None) -> tuple:
    """The (a, b, out) maps, Problem and epilogue record of a GEMM in whole 128 x 256 tiles: a dense
    job of a fused launch (the MoE forward's shared MLP); maps cached in `tmaps`."""
    prob = problem_record(a, b, shape.mo, shape.no, shape.kr, tile_counts(shape), shape.swiglu_f)
    epi = epi_record(out, shape.mo, shape.swiglu_f or shape.no, shape.epilogue, gate_up)
    return (*operand_tmaps(tmaps, a, b, out, uses_tma, stores_through_tma(shape.epilogue, uses_tma)), prob, epi)


def job_record(shape: GemmShape, a, b, out, tmaps: dict, uses_tma: bool, gate_up=None) -> np.void:
    """kernel_head's values as one gemm::JobRecord (job_record_dtype of the shape's epilogue)."""
    ta, tb, tc, prob, epi = kernel_head(shape, a, b, out, tmaps, uses_tma, gate_up)
    rec = np.zeros((), job_record_dtype(epi.dtype))
    rec["a"], rec["b"], rec["c"], rec["p"], rec["epi"] = ta, tb, tc, prob, epi
    return rec[()]


def epi_record(out, mo: int, no: int, epilogue: str = "store", gate_up=None) -> np.void:
    """The epilogue's view of a row-major output of mo rows (row stride: its last dim) and no
    columns (SwiGLU: the f columns of the output, or of dA; gate_up: the [mo, 2f] pre-activations)."""
    store = epilogue in STORE_EPILOGUES
    epi = np.zeros(1, EPI_DTYPE if store else SWIGLU_EPI_DTYPE)[0]
    epi["out"], epi["ldo"], epi["mo"] = out.data.ptr, out.shape[-1], mo
    epi["no" if store else "f"] = no
    if gate_up is not None:
        epi["pre"] = gate_up.data.ptr
    return epi


def gate_up_array(gate_up, shape, dev: int, stream: Any = None, **inputs):
    """The SwiGLU epilogues' pre-activations [rows, 2F] bf16, checked: optional (written) under
    "swiglu", required (read) under "swiglu_backward", refused under "store"."""
    rows, f = shape.out_shape[0], shape.swiglu_f or shape.no
    if shape.epilogue in STORE_EPILOGUES:
        if gate_up is not None:
            raise ValueError("gate_up is for the SwiGLU epilogues ('swiglu' keeps it, 'swiglu_backward' reads it)")
        return None
    if gate_up is None:
        if shape.epilogue == "swiglu_backward":
            raise ValueError("epilogue='swiglu_backward' needs gate_up, the forward's [gate, up] pre-activations")
        return None
    gate_up = check_array(gate_up, "gate_up", dtypes=(_bf16(),), device=dev, stream=stream,
                          writable=shape.epilogue == "swiglu")
    if tuple(gate_up.shape) != (rows, 2 * f):
        raise ValueError(f"gate_up must be [{rows}, {2 * f}] bf16 (gate columns, then up), got {tuple(gate_up.shape)}")
    refuse_overlap("gate_up", gate_up, **inputs)
    return gate_up


@dataclass
class GemmPlan:
    """One compiled, launch-checked GEMM for a (layout, epilogue, out dtype, shape, grid)."""

    shape: GemmShape
    out_dtype: np.dtype
    kernel_name: str
    grid: int
    ntiles: int
    tiles: tuple[int, int, int]
    launch: Any
    words: Any  # cupy uint64[2]: the tile queue's head and CTAs out (reset by the kernel's last CTA)
    uses_tma: bool = True
    splits: int = 1  # split-K: the kernel writes fp32 partials, reduce_kernel sums them in order
    reduce_kernel: Any = None
    tile_n: int = 256  # the tile configuration, 128 x tile_n
    stream_k: StreamKSplit | None = None
    sk_record: Any = None  # STREAM_K_DTYPE: its workspace and counters (allocated with the plan)
    status: Any = None     # the stream-K finishers' bounded waits (kosmos.runtime.DeviceStatus)
    _sk_buffers: tuple = ()  # the workspace and counters sk_record points to
    mx_a: bool = False     # A is MXFP8 (a DeviceMX: codes + scales), dequantized in the consumers
    mx_b: bool = False     # B is MXFP8 too (gfx950: both scales applied by the block-scaled MFMA)
    _tmaps: dict = field(default_factory=dict)
    _args: dict = field(default_factory=dict)  # args() by the arrays' addresses and shapes
    # The queue words are shared by every call, so calls must run one after another on the device,
    # from any thread or stream. Nothing else of a call lives on the host: graphs can replay it.
    # A plain or split-K plan keeps an order of its own, outside the GPU's (device_order): its CTAs
    # never wait on other CTAs or ranks, so beside a World's persistent grid it is only slower (its
    # CTAs start as SMs free up), never deadlocked. A stream-K plan takes the GPU's order
    # (stream_k_shared): its finishers wait on other CTAs of the launch, which must all be resident.
    _order: DeviceOrder = field(default_factory=DeviceOrder)

    @property
    def tma_store(self) -> bool:
        return stores_through_tma(self.shape.epilogue, self.uses_tma)

    @property
    def partial_rows(self) -> int:
        """Rows of each split-K partial in the workspace: the output's, padded to whole tiles."""
        return self.tiles[0] * DEVICE_CONSTANTS["kTileM"]

    def args(self, a, b, out, words=None, gate_up=None, epi_rows=None) -> tuple:
        """The standard kernel arguments (tma, tmb, tmc, problem, epilogue, queue words); epi_rows:
        the epilogue's rows per split (split-K's padded partials), default the output's."""
        s = self.shape
        scales = b_scales = None
        if self.mx_a:
            a, scales = a.data, a.scales
        if self.mx_b:
            b, b_scales = b.data, b.scales
        key = args_key(a, b, out, scales, b_scales, gate_up) if words is None and epi_rows is None else None
        hit = self._args.get(key)
        if hit is not None:
            return hit
        prob = problem_record(a, b, s.mo, s.no, s.kr, self.tiles, s.swiglu_f, self.splits)
        if scales is not None:
            prob["a_scales"] = scales.data.ptr
        if b_scales is not None:
            prob["b_scales"] = b_scales.data.ptr
        epi = epi_record(out, epi_rows or s.mo, s.swiglu_f or s.no, s.epilogue, gate_up)
        ta, tb, tc = operand_tmaps(self._tmaps, a, b, out, self.uses_tma, self.tma_store, self.mx_a)
        args = (ta, tb, tc, prob, epi, self.words if words is None else words)
        if key is not None:
            remember(self._args, key, args)
        return args

    def check_stream_k(self) -> None:
        """Raise an earlier call's failed stream-K wait (host-mapped: no synchronization unless one
        failed); the counters are zeroed first (late partials may have counted after the wait gave
        up), so the plan works again after the error."""
        if self.status.failed:
            import cupy

            cupy.cuda.runtime.deviceSynchronize()
            self._sk_buffers[1].fill(0)
            self.status.raise_if_failed()

    def __call__(self, a, b, out, stream=None, gate_up=None) -> None:
        with self._order.lock:
            self._order.join(stream)
            if self.stream_k is not None:
                from .runtime import kernel_id

                self.check_stream_k()
                self.launch(self.args(a, b, out) + (self.sk_record, self.status.wait_ctx(kernel_id("KERNEL_GEMM"))),
                            stream=stream)
            elif self.splits == 1:
                self.launch(self.args(a, b, out, gate_up=gate_up), stream=stream)
            else:
                import cupy

                s, rows = self.shape, self.partial_rows
                ws = cupy.empty((self.splits * rows, s.no), dtype=cupy.float32)
                self.launch(self.args(a, b, ws, epi_rows=rows), stream=stream)
                n = s.mo * s.no
                blocks = max(1, min(-(-n // (4 * 256)), 8 * self.grid))
                self.reduce_kernel((blocks,), (256,), (ws, out, np.int64(n), np.int32(self.splits),
                                                       np.int64(rows * s.no)), stream=stream)


_plans: dict[tuple, GemmPlan] = {}
_plans_lock = threading.Lock()
_stream_k_state: dict[int, tuple] = {}


def stream_k_shared(dev: int, sms: int) -> tuple:
    """(workspace, counters, status, order) of every stream-K plan on device `dev`, made once: the
    largest split any grid of this GPU takes (a tail of < 2 x sms tiles, <= MAX_RANGES - 1 partials
    each: ~100 MB on the H200). Shared, so plans of many shapes (a MoE layer's variable token counts)
    do not each hold one; their calls run one after another on the device, and a CUDA graph replays
    them against the same buffers. Their order is the GPU's, which every World there joins: a
    finisher waits on other CTAs of its launch, so no other persistent grid may hold SMs beside it."""
    import cupy

    from .runtime import DeviceStatus

    with _plans_lock:
        state = _stream_k_state.get(dev)
        if state is None:
            tail = 2 * sms - 1
            state = (cupy.empty(tail * (MAX_RANGES - 1) * PARTIAL_BYTES // 4, dtype=cupy.float32),
                     cupy.zeros(tail, dtype=cupy.uint64), DeviceStatus(rank=0), device_order(dev))
            _stream_k_state[dev] = state
    return state


def stream_k_record(sk: StreamKSplit, dev: int, sms: int) -> np.void:
    """The kernels' StreamK record (STREAM_K_DTYPE) of split `sk` in device `dev`'s shared workspace
    (stream_k_shared)."""
    ws, arrived, _, _ = stream_k_shared(dev, sms)
    rec = np.zeros((), STREAM_K_DTYPE)
    rec["ws"], rec["arrived"] = ws.data.ptr, arrived.data.ptr
    rec["full"], rec["tail"], rec["ranges"] = sk.full, sk.tail, sk.ranges
    return rec[()]


def get_plan(shape: GemmShape, out_dtype: np.dtype, sm_cap: int | None = None, split_k: int | None = 1,
             tile_n: int | None = None, stream_k: bool | None = None, mx_a: bool = False,
             transposed: bool = False, mx_b: bool = False) -> GemmPlan:
    """The cached plan for a GEMM; split_k: 1 = none, None = choose_split_k, n = n K-ranges;
    tile_n: 256, 192 or 128, None = choose_tile_n; stream_k: True, False, None = choose_stream_k (only
    when tile_n is None and split_k is 1: a caller who names the tile gets whole tiles, one who asks
    for split_k=None gets choose_split_k's choice). mx_a: A is MXFP8 (mx_a_path says when: whole
    tiles, no split). transposed (with mx_a, TN, bf16): the plan's out is the result's transpose,
    [no, mo] (EpiStoreBf16TmaT: the swapped MXFP8 TN's). mx_b (with mx_a; gfx950): B is MXFP8 too
    and the block-scaled MFMA applies both scales (scaled_route; 128 x 256 whole tiles)."""
    import cupy

    from .runtime.launch import PersistentLaunch, sm_count

    dev = cupy.cuda.Device().id
    # $KOSMOS_HIPSRC: a plan holds its tree's kernels (runtime.source.kernel_tree: an in-process A/B)
    key = (shape, np.dtype(out_dtype).str, sm_cap, split_k, tile_n, stream_k, mx_a, transposed, mx_b, dev, _extra_options,
           os.environ.get("KOSMOS_HIPSRC"))
    with _plans_lock:
        plan = _plans.get(key)
    if plan is not None:
        return plan
    sms = sm_count()
    ctas = sms if sm_cap is None else max(1, min(sms, int(sm_cap)))  # the grid before clipping to tiles
    wgmma = _arch_info(dev, _extra_options)[0] == 1
    plain = shape.epilogue == "store"
    check_tile_n(tile_n, shape.epilogue, wgmma)
    if mx_a and not mx_b and not mx_a_path(shape.layout, shape.epilogue, split_k, stream_k, wgmma):
        raise ValueError(f"MXFP8 A in the mainloop takes {' or '.join(MX_A_LAYOUTS)}, the store epilogue, whole "
                         f"tiles (no split-K, no stream-K) on Hopper; got {shape.layout}, {shape.epilogue!r}, "
                         f"split_k={split_k}, stream_k={stream_k}")
    if mx_b and not (mx_a and shape.layout == "TN" and plain and not wgmma and tile_n in (None, 256)):
        raise ValueError("MXFP8 A and B in the mainloop (the block-scaled MFMA) take TN, the store epilogue and "
                         f"128 x 256 tiles on gfx950; got {shape.layout}, {shape.epilogue!r}, tile_n={tile_n}")
    if mx_b:
        tile_n = 256
    if transposed and not (mx_a and shape.layout == "TN" and np.dtype(out_dtype) == _bf16()):
        raise ValueError("a transposed result is the MXFP8-A TN GEMM's, in bf16")
    if transposed and shape.mo % 8:  # out [no, mo]: its TMA map needs 16-byte rows
        raise ValueError(f"a transposed result needs the GEMM's rows a multiple of 8, got {shape.mo}")
    if mx_a:
        split_k, stream_k = 1, False
    # Stream-K first (128 x 256 tiles, no split-K): when asked, or when its wave model wins.
    if not (stream_k is None or isinstance(stream_k, bool)):
        raise TypeError(f"stream_k must be True, False or None (automatic), got {stream_k!r}")
    sk = None
    sk_ok = wgmma and plain and split_k in (1, None) and tile_n in (None, 256)
    if stream_k is True and not sk_ok:
        raise ValueError("stream_k=True is a Hopper (wgmma) path for the store epilogues on 128 x 256 tiles, "
                         "without split-K")
    if stream_k is True:
        tm, tn, k_slabs = tile_counts(shape, 256)
        sk = stream_k_split(tm * tn, ctas, k_slabs)
        if sk is None:
            raise ValueError(f"stream_k=True: a reduction of {k_slabs} slabs of 64 is too short to cut into "
                             f"K-ranges of {MIN_SLABS_PER_RANGE} or more")
    elif tile_n is None:
        widths = TILE_WIDTHS if wgmma and plain else (256,)
        tile_n, sk = choose_tiling(shape, ctas, widths, stream_k is None and split_k == 1 and sk_ok)
    if sk is not None:
        tile_n, split_k = 256, 1
    tiles = tile_counts(shape, tile_n)
    ntiles = tiles[0] * tiles[1]
    if split_k is None:
        splits = choose_split_k(ntiles, ctas, tiles[2], shape.mo * shape.no) if plain else 1
    else:
        splits = check_split_k(split_k, tiles[2])
        if splits > 1 and not plain:
            raise ValueError(f"split_k > 1 does not combine with epilogue={shape.epilogue!r}")
    units = sk.units if sk is not None else ntiles * splits
    mod = _module()
    if sk is not None:
        name = kernel_name(shape.layout, "store", out_dtype, 256, stream_k=True)
        red = None
    elif splits > 1:
        name = kernel_name(shape.layout, "store", np.float32, tile_n)  # fp32 partials into a workspace
        red = mod.get_function("kosmos_gemm_splitk_reduce_" + ("f32" if np.dtype(out_dtype) == np.float32 else "bf16"))
    else:
        name = kernel_name(shape.layout, shape.epilogue, out_dtype, tile_n, mx_a=mx_a, transposed=transposed, mx_b=mx_b)
        red = None
    kern = mod.get_function(name)
    grid = grid_size(units, sms, sm_cap)
    launch = PersistentLaunch.checked(kern, grid, block_threads(), shared_mem_bytes())
    plan = GemmPlan(shape, np.dtype(out_dtype), name, grid, units, tiles, launch,
                    words=cupy.zeros(2, dtype=cupy.uint64), uses_tma=wgmma, splits=splits, reduce_kernel=red,
                    tile_n=tile_n, mx_a=mx_a, mx_b=mx_b)
    if sk is not None:
        ws, arrived, status, order = stream_k_shared(dev, sms)
        plan.stream_k, plan.sk_record, plan.status, plan._order = sk, stream_k_record(sk, dev, sms), status, order
        plan._sk_buffers = (ws, arrived)
    with _plans_lock:
        _plans[key] = plan
    return plan


# An experiment, not an API (notes/moe.md, session 14): the TN GEMM with a copy beside it on the
# producer warpgroup's idle warps (hipsrc/gemm.hip kosmos_gemm_tn_bf16_side_copy, Hopper only).
SIDE_COPY_DTYPE = np.dtype([("src", np.uint64), ("dst", np.uint64), ("bytes", np.uint64), ("cursor", np.uint64)],
                           align=True)  # mirrors struct SideCopy (builder_wgmma.h): kosmos.runtime.mirror


def _side_copy_matmul(a, b, out, src, dst, cursor, stream=None) -> None:
    """out = a @ b.T (bf16, 128 x 256 whole tiles) while the builder CTAs copy src into dst (bytes,
    a multiple of 16). cursor: a zeroed uint64 device word the kernel resets at its end."""
    from .runtime.launch import PersistentLaunch

    if arch_path() != "wgmma":
        raise RuntimeError("the side copy is a Hopper (wgmma) experiment")
    bf16 = _bf16()
    a, b = check_array(a, "a", dtypes=(bf16,)), check_array(b, "b", dtypes=(bf16,))
    shape = gemm_shape("TN", a.shape, b.shape)
    out = output_array(out, shape.out_shape, bf16, stream=stream, a=a, b=b)
    src, dst = check_array(src, "src"), check_array(dst, "dst", writable=True)
    if src.nbytes != dst.nbytes or src.nbytes % 16:
        raise ValueError(f"src and dst must have the same size, a multiple of 16 bytes; got {src.nbytes}, {dst.nbytes}")
    plan = get_plan(shape, bf16, tile_n=256, stream_k=False)
    kern = _module().get_function("kosmos_gemm_tn_bf16_side_copy")
    side = np.zeros((), SIDE_COPY_DTYPE)
    side["src"], side["dst"], side["bytes"], side["cursor"] = src.data.ptr, dst.data.ptr, src.nbytes, cursor.data.ptr
    launch = PersistentLaunch.checked(kern, plan.grid, block_threads(), shared_mem_bytes())
    with plan._order.lock:
        plan._order.join(stream)
        launch(plan.args(a, b, out) + (side[()],), stream=stream)


def output_array(out, shape: tuple[int, ...], dt: np.dtype, *, name: str = "out", device: int | None = None,
                 stream: Any = None, **inputs):
    """A kernel's output: allocated when None, else checked (on `device`, default the current one;
    writable, C-contiguous and aligned, ordered on the stream; dtype, shape, no overlap with an input)."""
    import cupy

    if out is None:
        return cupy.empty(shape, dtype=dt)
    device = cupy.cuda.Device().id if device is None else device
    out = check_array(out, name, device=device, stream=stream, writable=True)
    if out.dtype != dt:
        raise TypeError(f"{name} has dtype {dtype_name(out.dtype)}; this kernel writes {dtype_name(dt)}")
    if tuple(out.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(out.shape)}, expected {shape}")
    refuse_overlap(name, out, **inputs)
    return out


def checked_output(out, out_dtype: Any, shape: tuple[int, ...], epilogue: str, stream: Any = None,
                   resolve: Any = None, **inputs) -> tuple[Any, np.dtype]:
    """matmul's (and grouped_matmul's) output and its dtype: out_dtype's default is a given out's
    dtype, resolved by `resolve(out_dtype, epilogue)` (default resolve_out_dtype); then output_array
    (allocated when None, else checked: device, writability, layout, dtype, shape, overlap with
    `inputs`)."""
    if out is not None:
        out = as_cupy(out, "out", stream=stream, writable=True)  # (a foreign array: its dtype as CuPy's)
        if out_dtype is None:
            out_dtype = out.dtype
    dt = (resolve or resolve_out_dtype)(out_dtype, epilogue)
    return output_array(out, shape, dt, stream=stream, **inputs), dt


def contracting_axis(layout: str, operand: int) -> int:
    """The reduction axis of operand 0 (a) or 1 (b) in `layout` (see the module docstring)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return {"TN": (1, 1), "NN": (1, 0), "NT": (0, 0)}[layout][operand]


MX_A_LAYOUTS = ("TN", "NN")  # A K-major: the layouts whose MXFP8 A the consumers dequantize
# The register path costs ~10 % of the MMA on every shape (the consumers' conversion: notes/mxfp8.md,
# sessions 16-17, 26); dequantizing A over HBM first costs its pass, ~1.5 F / (B No) of the GEMM's time
# (3 bytes an element at B bytes/s against F FLOP/s): the register path pays up to more columns where
# HBM is slower. Measured crossovers (bench/gemm.py --precision mxfp8 times both paths), output
# columns: H200 (session 17) No 1,792 register 0.86 of bf16 / pass 0.78, No 3,584 0.85 / 0.88; H100
# (session 27, two runs) the register path ahead at No 3,584 and 4,096 in both (+1..+6 %, one shape
# -1 %), a toss-up at 6,656 (the runs disagree), mostly behind from 7,168.
MX_A_COLUMNS_BY_CARD = {"H100": 4096, "H200": 2048}
MX_A_COLUMNS_ELSEWHERE = 2048
MX_A_MAX_COLUMNS: int | None = None  # set: that limit on every card (benches and tests force a path)


def mx_a_max_columns(card: str | None = None) -> int:
    """The widest GEMM (output columns) whose MXFP8 A takes the register path on `card` (a device
    name; None: the current device's)."""
    if MX_A_MAX_COLUMNS is not None:
        return MX_A_MAX_COLUMNS
    if card is None:
        import cupy

        card = _device_name(cupy.cuda.Device().id)
    return next((v for k, v in MX_A_COLUMNS_BY_CARD.items() if k in card), MX_A_COLUMNS_ELSEWHERE)


@functools.lru_cache(maxsize=None)
def _device_name(device_id: int) -> str:  # cudaGetDeviceProperties is slow: once a device
    from .timing import device_name

    return device_name()


def mx_a_path(layout: str, epilogue: str, split_k: int | None, stream_k: bool | None, wgmma: bool,
              no: int = 0, max_columns: int = MX_A_COLUMNS_ELSEWHERE) -> bool:
    """Whether an MXFP8 A of a GEMM of `no` output columns runs through the mainloop (TileConfig MxA:
    codes in shared memory, dequantized into wgmma's register fragments, no pass over A); else it is
    dequantized first (cheaper where the GEMM is wider than `max_columns`: mx_a_max_columns)."""
    return (wgmma and layout in MX_A_LAYOUTS and epilogue == "store" and split_k in (1, None)
            and stream_k is not True and no <= max_columns)


def dequantized_operand(t: Any, name: str, layout: str, operand: int, stream: Any = None) -> Any:
    """t itself, or, for an MXFP8 operand (kosmos.mx.DeviceMX), its exact bf16 dequantization after
    checking that its blocks run along its contracting axis in `layout`."""
    from . import mx

    if not isinstance(t, mx.DeviceMX):
        return t
    t = mx.check_mx(t, name, axis=contracting_axis(layout, operand), stream=stream)
    return mx.dequantize_device(t, stream=stream)


@uses_stream
def matmul(a, b, layout: str = "TN", out=None, out_dtype=None, sm_cap: int | None = None, *,
           epilogue: str = "store", gate_up=None, split_k: int | None = 1, tile_n: int | None = None,
           stream_k: bool | None = None, stream=None):
    """Persistent GEMM on the builder tile; see the module docstring for layouts.

    Returns ``out`` (allocated when None). ``sm_cap`` limits the grid to that many CTAs (SMs).
    ``split_k``: 1 (default) = one work unit per output tile; n > 1 = n K-ranges per tile, fp32
    partials summed in a fixed order by a second kernel (bitwise reproducible); None = choose it
    from a wave model (choose_split_k) when the tiles alone would leave SMs idle. ``tile_n``: the
    tile width, 256, 192 or 128 (Hopper, store epilogues), None = choose_tile_n's wave model.
    ``stream_k`` (Hopper, store epilogues, 128 x 256 tiles, no split-K): the last partial wave of
    tiles, or the last one to two waves (stream_k_split: the wave model's pick), are cut into 2-4
    K-ranges each, summed in range order inside the kernel (fp32 partials in
    one workspace per device that every stream-K plan shares, ~100 MB on the H200, made at the
    first; stream-K calls then run one after another on the device); True, False, None (default)
    = choose_stream_k's wave model, when ``tile_n`` is None and ``split_k`` is 1 (it takes stream-K
    on grids of a few waves whose last one is short and whose reduction is long: 8-19 % faster
    there on the H200). Results are bitwise reproducible for a given (shape, sm_cap, split_k,
    tile_n, stream_k); whole tiles of every width round alike, K-ranges and splits round
    differently: an oracle that must match another whole-tile GEMM bit for bit names ``tile_n``.
    ``gate_up``: the SwiGLU epilogues' pre-activations (see the module docstring).

    ``a`` and ``b`` are bf16, or MXFP8 (kosmos.mx.DeviceMX, blocks along the operand's contracting
    axis; the H200 has no block-scaled MMA: notes/mxfp8.md). An MXFP8 ``a`` of a TN or NN GEMM of at
    most mx_a_max_columns() output columns with the store epilogue on Hopper (mx_a_path; not with
    split-K or stream_k=True) stays MXFP8: the
    consumers dequantize its codes exactly into wgmma's register fragments, and ``b`` (bf16 or MXFP8)
    is rewritten once with its reduction index permuted per 64-slab (kosmos.mx.kperm_operand): the
    result is bitwise ``matmul(permute_k(a'), permute_k(b'), tile_n=...)`` on the dequantized
    operands a', b' (kosmos.mx.permute_k: the same products, summed in another order). Any other
    MXFP8 operand is dequantized exactly to bf16 on the stream first, and the result is bitwise the
    bf16 GEMM of the dequantized operands. A TN GEMM of two MXFP8 operands with ``tile_n`` None whose
    b has more rows than a may run as (b a^T)^T where that moves fewer bytes (mx_swap_pays: a wgrad
    on the column-wise copies stored transposed, kosmos.mx.quantize_both).
    """
    import cupy

    from . import mx

    key = call_signature(a, b, out, gate_up, layout=layout, out_dtype=out_dtype, sm_cap=sm_cap, epilogue=epilogue,
                         split_k=split_k, tile_n=tile_n, stream_k=stream_k, options=_extra_options,
                         tree=os.environ.get("KOSMOS_HIPSRC"))
    hit = _checked_calls.get(key)
    if hit is not None:  # these arrays and options passed every check below before
        plan, out_shape, dt = hit
        out = cupy.empty(out_shape, dtype=dt) if out is None else out
        plan(a, b, out, stream=stream, gate_up=gate_up)
        return out
    if isinstance(layout, str):
        layout = layout.upper()
    dev = cupy.cuda.Device().id
    bf16 = _bf16()
    if isinstance(a, mx.DeviceMX) and layout in MX_A_LAYOUTS:
        b_shape = tuple(b.data.shape if isinstance(b, mx.DeviceMX) else b.shape)
        shape = gemm_shape(layout, tuple(a.data.shape), b_shape, epilogue)
        out_bytes = np.dtype(out_dtype if out_dtype is not None else getattr(out, "dtype", bf16)).itemsize
        wgmma = arch_path() == "wgmma"
        route = mx_route(shape, isinstance(b, mx.DeviceMX), out_bytes, split_k, stream_k, tile_n, wgmma,
                         mx_a_max_columns(), scaled_mfma=not wgmma and mx.scaled_mfma_available())
        if route == "scaled":
            return _matmul_mx_scaled(a, b, out, out_dtype, sm_cap, stream)
        if route == "swapped":
            return _matmul_mx_a_swapped(a, b, out, out_dtype, sm_cap, stream)
        if route == "regs":
            return _matmul_mx_a(a, b, layout, out, out_dtype, sm_cap, tile_n, stream)
    a, b = (dequantized_operand(t, name, layout, i, stream) for i, (t, name) in enumerate(((a, "a"), (b, "b"))))
    a = check_array(a, "a", dtypes=(bf16,), device=dev, stream=stream)
    b = check_array(b, "b", dtypes=(bf16,), device=dev, stream=stream)
    shape = gemm_shape(layout, a.shape, b.shape, epilogue)
    if epilogue == "accumulate" and out is None:
        raise ValueError(f"epilogue='accumulate' adds into out: pass a float32 out of shape {list(shape.out_shape)}")
    out, dt = checked_output(out, out_dtype, shape.out_shape, epilogue, stream, a=a, b=b)
    gate_up = gate_up_array(gate_up, shape, dev, stream, a=a, b=b, output=out)
    plan = get_plan(shape, dt, sm_cap, split_k, tile_n, stream_k)
    plan(a, b, out, stream=stream, gate_up=gate_up)
    _checked_calls.put(key, (plan, shape.out_shape, dt))
    return out


# matmul's checked calls (kosmos.runtime.call_cache): the plan, output shape and dtype they resolved to
_checked_calls = CallCache()


def _matmul_mx_a(a, b, layout: str, out, out_dtype, sm_cap: int | None, tile_n: int | None, stream: Any):
    """matmul's MXFP8-A path (mx_a_path): b permuted per slab, then the MxA builder."""
    from . import mx

    a = mx.check_mx(a, "a", axis=contracting_axis(layout, 0), stream=stream)
    b_shape = tuple(b.data.shape if isinstance(b, mx.DeviceMX) else b.shape)
    shape = gemm_shape(layout, a.shape, b_shape)
    bp = mx.kperm_operand(b, axis=contracting_axis(layout, 1), stream=stream)
    out, dt = checked_output(out, out_dtype, shape.out_shape, "store", stream, a=a.data, a_scales=a.scales, b=bp)
    plan = get_plan(shape, dt, sm_cap, 1, tile_n, False, mx_a=True)
    plan(a, bp, out, stream=stream)
    return out


def _matmul_mx_scaled(a, b, out, out_dtype, sm_cap: int | None, stream: Any):
    """matmul's gfx950 path (mx_route "scaled"): a TN of two MXFP8 operands, blocks along k, whose
    codes the builder stages as they are and whose scales the block-scaled MFMA applies
    (hipsrc/kosmos/gemm/mfma_mx.h): no dequantize pass. Accumulated in fp32 in k order, 64 at a time."""
    from . import mx

    a = mx.check_mx(a, "a", axis=1, stream=stream)
    b = mx.check_mx(b, "b", axis=1, stream=stream)
    shape = gemm_shape("TN", a.shape, b.shape)
    out, dt = checked_output(out, out_dtype, shape.out_shape, "store", stream, a=a.data, a_scales=a.scales,
                             b=b.data, b_scales=b.scales)
    get_plan(shape, dt, sm_cap, 1, None, False, mx_a=True, mx_b=True)(a, b, out, stream=stream)
    return out


def mx_swap_pays(shape: GemmShape, out_bytes: int) -> bool:
    """Whether a TN GEMM of two MXFP8 operands runs faster as (b a^T)^T. The register path keeps
    A's codes and rewrites B over HBM (~3 bytes an element: codes read, bf16 written), so A should
    be the operand with more rows -- a wgrad's dY^T and X^T (quantize_both(transpose_columns=True))
    differ by up to 10x -- where the bytes saved outweigh transposing the result (read and written).
    The caller checks that the swapped GEMM (No = a's rows) takes the register path."""
    return (shape.layout == "TN" and shape.no > shape.mo
            and 3 * shape.kr * (shape.no - shape.mo) > 2 * out_bytes * shape.mo * shape.no)


def mx_swap_fits(shape: GemmShape) -> bool:
    """Whether a GEMM has a swapped form (b a^T)^T: a TN whose a rows, the swapped GEMM's output
    columns, are a multiple of 64 as every GEMM's N must be."""
    return shape.layout == "TN" and shape.mo % 64 == 0


def mx_route(shape: GemmShape, b_is_mx: bool, out_bytes: int, split_k: int | None, stream_k: bool | None,
             tile_n: int | None, wgmma: bool, max_columns: int, scaled_mfma: bool = False) -> str:
    """How matmul runs a GEMM whose a is MXFP8: "scaled" (gfx950, scaled_mfma: a TN of two MXFP8
    operands in whole 128 x 256 tiles on the block-scaled MFMA, both scales applied there), "regs"
    (the MxA builder, mx_a_path), "swapped" (the MxA builder on (b a^T)^T, mx_swap_pays; b MXFP8
    too, no tile width named) or "pass" (the MXFP8 operands dequantized to bf16 first)."""
    if (scaled_mfma and b_is_mx and shape.layout == "TN" and shape.epilogue == "store" and split_k in (1, None)
            and stream_k is not True and tile_n in (None, 256)):
        return "scaled"
    on_path = functools.partial(mx_a_path, shape.layout, shape.epilogue, split_k, stream_k, wgmma,
                                max_columns=max_columns)
    if b_is_mx and tile_n is None and mx_swap_fits(shape) and on_path(no=shape.mo) and mx_swap_pays(shape, out_bytes):
        return "swapped"
    return "regs" if on_path(no=shape.no) else "pass"


def _matmul_mx_a_swapped(a, b, out, out_dtype, sm_cap: int | None, stream: Any):
    """matmul's TN on two MXFP8 operands as (b a^T)^T (mx_swap_pays): the MxA builder on b's codes
    and a rewritten, its [b rows, a rows] result stored transposed into out by its epilogue (bf16)
    or transposed after it on the stream (fp32)."""
    from . import mx
    from .runtime.module import load_module

    a = mx.check_mx(a, "a", axis=1, stream=stream)
    b = mx.check_mx(b, "b", axis=1, stream=stream)
    shape = gemm_shape("TN", a.shape, b.shape)
    out, dt = checked_output(out, out_dtype, shape.out_shape, "store", stream, a=a.data, a_scales=a.scales,
                             b=b.data, b_scales=b.scales)
    if dt == _bf16():  # the MxA builder on b's codes, its tiles stored transposed into out
        swapped = gemm_shape("TN", b.shape, a.shape)
        get_plan(swapped, dt, sm_cap, 1, None, False, mx_a=True, transposed=True)(
            b, mx.kperm_operand(a, axis=1, stream=stream), out, stream=stream)
        return out
    out_t = _matmul_mx_a(b, a, "TN", None, dt, sm_cap, None, stream)  # fp32: the result, then its transpose
    rows, cols = out_t.shape  # grid y: cols / 64, a's rows (<= max_columns: far under 65,535 x 64)
    kernel = load_module("transpose.hip").get_function("kosmos_transpose_b32")
    kernel((-(-rows // 64), -(-cols // 64)), (256,), (out_t, out, np.int64(rows), np.int64(cols)))
    return out
