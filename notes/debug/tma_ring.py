"""What a TMA ring reaches streaming 4 KB rows, beside a plain-load stream of the same bytes.

Session 30 (notes/moe.md): with its MMAs removed (no_mma.patch) the grouped GEMM at 256 rows per
expert is no faster, so its ~2.0 TB/s of DRAM is what its load stream delivers (the 192-wide tile:
5 stages of 40 KB a CTA, 5 boxes of 64 rows x 128 B, 128-byte swizzle, 256 B L2 promotion), where
plain loads of the same rows reach ~3.07 TB/s (hbm_pattern.py). This kernel is that ring alone: one producer thread
issues a stage's boxes when the stage is free, 4 consumer warps release each stage as it lands.
A "set" is `rows` consecutive rows of a bf16 [*, 2048] tensor read 64 columns (128 B) a stage, as
a GEMM tile reads its weight rows slab by slab; CTAs take sets round robin; with share 2 two
neighbouring CTAs read every set (the two row tiles of an expert reading the same weights).
Every config reads the same ~1 GB once from DRAM (share 2 twice into SMs); GB/s = unique bytes /
time. Median of 15 timings of 3 back-to-back launches each (events), configs interleaved.
Then the grouped GEMM itself (Qwen3-30B fwd1 at 256 and 2,048 rows per expert) beside its load
stream alone (tma_units: its units, boxes, order and claim queue, no MMA, no epilogue), timed
by kosmos.timing: if the loads alone are as slow as the GEMM, the stream's shape is the limit;
if they reach ~3 TB/s, what the GEMM adds between its loads is.

    python3 notes/debug/tma_ring.py
"""
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hbm_pattern import SOURCE as LDG_SOURCE  # noqa: E402
from kosmos import gemm  # noqa: E402
from kosmos.runtime.module import current_target  # noqa: E402
from kosmos.runtime.source import compile_options  # noqa: E402

SOURCE = r"""
#include "kosmos/gemm/arch.h"
#include "kosmos/gemm/schedule.h"
#include "kosmos/gemm/sm90_wgmma.h"
using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::gemm::sm90;

// A stage is 1024-byte aligned (128-byte swizzle); full: the TMA's bytes (one arrival: the
// producer's expect_tx), empty: the 4 consumer warps.
KOSMOS_DEVICE unsigned char* aligned_1024(unsigned char* p) { return p + ((1024 - (smem_addr(p) & 1023)) & 1023); }
KOSMOS_DEVICE void init_ring(u64* full, u64* empty, int stages) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 4);
    }
    mbar_fence_init();
  }
  __syncthreads();
}

// A stage = NB boxes of BR rows x 64 bf16 (128 B a row).
template <int S, int BR, int NB>
__global__ void __launch_bounds__(160, 1) tma_ring(const KOSMOS_GRID_CONSTANT TensorMap map, int sets, int k_slabs,
                                                   int share, unsigned* sink) {
  constexpr int kStage = BR * 128 * NB;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[S], empty[S];
  unsigned char* base = aligned_1024(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(full, empty, S);
  const int copies = gridDim.x / share;
  u32 s = 0, ph = 0;
  if (warp == 0) {
    if (lane == 0) {
      tma_prefetch_desc(&map);
      for (int set = blockIdx.x / share; set < sets; set += copies) {
        for (int kb = 0; kb < k_slabs; ++kb) {
          mbar_wait(&empty[s], ph ^ 1);
          mbar_arrive_expect_tx(&full[s], kStage);
#pragma unroll
          for (int b = 0; b < NB; ++b)
            tma_load_2d(base + s * kStage + b * BR * 128, &map, kb * 64, set * BR * NB + b * BR, &full[s]);
          if (++s == S) { s = 0; ph ^= 1; }
        }
      }
    }
  } else {
    unsigned acc = 0;
    for (int set = blockIdx.x / share; set < sets; set += copies) {
      for (int kb = 0; kb < k_slabs; ++kb) {
        mbar_wait(&full[s], ph);
        acc ^= reinterpret_cast<const unsigned*>(base + s * kStage)[threadIdx.x];
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (++s == S) { s = 0; ph ^= 1; }
      }
    }
    if (acc == 0x9E3779B9u) atomicAdd(sink, 1u);
  }
}

// The grouped TN GEMM's load stream alone: its units (experts x tiles_m x tiles_n in schedule.h's
// raster order), claimed from an atomic queue (words[0]; the last CTA out resets both words), each
// unit k_slabs stages of A's 2 boxes of 64 rows (the unit's 128 token rows) + B's NB boxes of 64
// rows (the expert's weight rows of the n tile, a 3-D map), in the ring of the builder's tile of
// that width (TileConfig: its stage count); no MMA, no epilogue. A stage with slot -1 stops the
// consumers.
template <int NB>
__global__ void __launch_bounds__(160, 1) tma_units(const KOSMOS_GRID_CONSTANT TensorMap map_a,
                                                    const KOSMOS_GRID_CONSTANT TensorMap map_b, int experts,
                                                    int rows_per, int tiles_n, int k_slabs, int a_boxes, int b_units,
                                                    unsigned* words, unsigned* sink) {
  typedef TileConfig<NB * 64> Cfg;
  constexpr int S = Cfg::kStages, kBox = 64 * 128, kStage = (2 + NB) * kBox;
  static_assert(kStage == Cfg::kStageBytes, "the builder's stage: A 128 rows + B NB x 64 rows");
  static_assert(S <= 5, "the host sizes shared memory for 5 stages (STAGES_192)");
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[S], empty[S];
  __shared__ int slot[S];
  unsigned char* base = aligned_1024(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  init_ring(full, empty, S);
  const int tiles_m = rows_per / 128, units = experts * tiles_m * tiles_n;
  u32 s = 0, ph = 0;
  if (warp == 0) {
    if (lane == 0) {
      tma_prefetch_desc(&map_a);
      tma_prefetch_desc(&map_b);
      for (;;) {
        const int u = int(atomicAdd(&words[0], 1u));
        const int e = u / (tiles_m * tiles_n);
        int tm = 0, tn = 0;
        raster(u % (tiles_m * tiles_n), tiles_m, tiles_n, tm, tn);
        for (int kb = 0; kb < (u < units ? k_slabs : 1); ++kb) {
          mbar_wait(&empty[s], ph ^ 1);
          slot[s] = u < units ? u : -1;
          if (u < units) {
            const int nb = (b_units == 2 || (b_units == 1 && tm == 0)) ? NB : 0;
            mbar_arrive_expect_tx(&full[s], (a_boxes + nb) * kBox);
            unsigned char* st = base + s * kStage;
            for (int h = 0; h < a_boxes; ++h)
              tma_load_2d(st + h * kBox, &map_a, kb * 64, e * rows_per + tm * 128 + h * 64, &full[s]);
            for (int c = 0; c < nb; ++c)
              tma_load_3d(st + (2 + c) * kBox, &map_b, kb * 64, tn * NB * 64 + c * 64, e, &full[s]);
          } else {
            mbar_arrive(&full[s]);
          }
          if (++s == S) { s = 0; ph ^= 1; }
        }
        if (u >= units) break;
      }
      if (atomicAdd(&words[1], 1u) == gridDim.x - 1) words[0] = words[1] = 0u;  // every claim is made
    }
  } else {
    unsigned acc = 0;
    for (;;) {
      mbar_wait(&full[s], ph);
      const int u = slot[s];
      if (u >= 0) acc ^= reinterpret_cast<const unsigned*>(base + s * kStage)[threadIdx.x];
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
      if (++s == S) { s = 0; ph ^= 1; }
      if (u < 0) break;
    }
    if (acc == 0x9E3779B9u) atomicAdd(sink, 1u);
  }
}
"""

COLS = 2048  # 4 KB bf16 rows, the Qwen3-30B fwd1 weights' K
STAGES_192 = 5  # hipsrc/kosmos/gemm/config.h TileConfig<192>::kStages (tma_units asserts its stage size)
# name: (stages, box rows, boxes a stage, share, L2 promotion bytes)
CONFIGS = {
    "4 x 5x64": (4, 64, 5, 1, 256),              # the 192-wide tile's boxes (A 2 + B 3), 4 of its 5 stages
    "4 x 5x64 share2": (4, 64, 5, 2, 256),       # ... every row read by two CTAs
    "4 x 5x64 share4": (4, 64, 5, 4, 256),       # ... by four (L2 -> SM traffic 4x the DRAM bytes)
    "4 x 5x64 share8": (4, 64, 5, 8, 256),       # ... by eight (128 CTAs)
    "4 x 5x64 promote128": (4, 64, 5, 1, 128),   # L2 fills of 128 B (the map's promotion)
    "4 x 5x64 promote0": (4, 64, 5, 1, 0),       # no promotion
    "4 x 2x160": (4, 160, 2, 1, 256),            # same bytes, 2 larger boxes a stage
    "8 x 1x160": (8, 160, 1, 1, 256),            # 20 KB stages, one box each, twice as many
    "8 x 2x64": (8, 64, 2, 1, 256),              # 16 KB stages, twice as many
    "5 x 5x64": (5, 64, 5, 1, 256),              # the 192-wide tile's ring: 200 KB in flight
    "2 x 5x64": (2, 64, 5, 1, 256),              # 80 KB in flight
}
BACK_TO_BACK = 3


def encode(ptr: int, rows: int, box_rows: int, promote: int = 256, dims: tuple[int, ...] = ()) -> np.void:
    """kosmos.gemm.encode_tmap's bf16 map (boxes of box_rows x 64, 128-byte swizzle) with the L2
    promotion a parameter (the library's is always 256 B): of [rows, COLS], or of C-contiguous
    `dims` (innermost first, e.g. (K, N, E) for [E, N, K]; box 1 in the outer dims)."""
    from cuda.bindings import driver as cu

    dims = dims or (COLS, rows)
    strides = np.cumprod(dims)[:-1] * 2
    p = cu.CUtensorMapL2promotion
    res, tm = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, len(dims), ptr,
        [cu.cuuint64_t(int(d)) for d in dims], [cu.cuuint64_t(int(st)) for st in strides],
        [cu.cuuint32_t(64), cu.cuuint32_t(box_rows)] + [cu.cuuint32_t(1)] * (len(dims) - 2),
        [cu.cuuint32_t(1)] * len(dims),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        {256: p.CU_TENSOR_MAP_L2_PROMOTION_L2_256B, 128: p.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
         0: p.CU_TENSOR_MAP_L2_PROMOTION_NONE}[promote],
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if res != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {res}")
    rec = np.zeros(1, gemm.TMAP_DTYPE)
    rec["words"][0] = np.array([int(w) for w in tm.opaque], dtype=np.uint64)
    return rec[0]


def interleaved_ms(runs: dict, iters: int = 17) -> dict:
    """Median ms of each call over `iters` rounds (the first two dropped), BACK_TO_BACK launches a
    timing, the calls interleaved round by round."""
    times = {m: [] for m in runs}
    for it in range(iters):
        for m, fn in runs.items():
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            for _ in range(BACK_TO_BACK):
                fn()
            b.record()
            b.synchronize()
            if it >= 2:
                times[m].append(cupy.cuda.get_elapsed_time(a, b) / BACK_TO_BACK)
    return {m: statistics.median(v) for m, v in times.items()}


# tma_units variants: (name, A boxes a stage, which units load B)
UNIT_VARIANTS = [
    ("its loads alone (tma_units)", 2, 2),
    ("  B only", 0, 2),
    ("  A only", 2, 0),
    ("  A + B on tile row 0 only", 2, 1),
    ("  B on tile row 0 only", 0, 1),
]


def grouped_stream(module, ctas: int, sink) -> None:
    """The grouped GEMM at Qwen3-30B's EP-8 share (16 experts, H 2,048, 2I 1,536: bench/moe.py),
    fwd1 plain at 256 and 2,048 rows per expert (tile 192), beside its load stream alone
    (tma_units<3>: 3 B boxes, the 192-wide tile's STAGES_192 stages)."""
    from kosmos import World
    from kosmos.dtypes import random_bf16
    from kosmos.grouped import grouped_matmul
    from kosmos.timing import time_calls

    e, h, n = 16, 2048, 1536
    k = module.get_function("tma_units<3>")
    smem = STAGES_192 * 5 * 64 * 128 + 1024
    k.max_dynamic_shared_size_bytes = smem
    words = cupy.zeros(2, cupy.uint32)
    with World() as world:
        for rows_per in (256, 2048):
            x, w = random_bf16((e * rows_per, h), 1), random_bf16((e, n, h), 2)
            counts = cupy.full((e,), rows_per, cupy.int32)
            ma = encode(x.data.ptr, e * rows_per, 64, dims=(h, e * rows_per))
            mb = encode(w.data.ptr, 0, 64, dims=(h, n, e))
            runs = {"grouped GEMM fwd1 (tile 192)": lambda _: grouped_matmul(x, w, counts, "TN", tile_n=192)}
            for name, a_boxes, b_units in UNIT_VARIANTS:
                runs[name] = lambda _, a_boxes=a_boxes, b_units=b_units: k(
                    (ctas,), (160,), (ma, mb, np.int32(e), np.int32(rows_per), np.int32(n // 192), np.int32(h // 64),
                                      np.int32(a_boxes), np.int32(b_units), words, sink), shared_mem=smem)
            # kosmos.timing: launches queued behind a blocker, so the host's time per call is not timed
            ms = {m: v.median_ms for m, v in time_calls(world, runs, 3, 20).items()}
            print(f"Qwen3-30B fwd1, {rows_per} rows per expert: {(x.nbytes + w.nbytes) / 1e6:.1f} MB read once at least")
            tiles_m, tiles_n = rows_per // 128, n // 192
            for m, t in ms.items():
                a_boxes, b_units = next(((a, b) for v, a, b in UNIT_VARIANTS if v == m), (2, 2))
                unique = (x.nbytes if a_boxes else 0) + (w.nbytes if b_units else 0)
                into_sms = e * tiles_n * (tiles_m * a_boxes + {0: 0, 1: 1, 2: tiles_m}[b_units] * 3) * (h // 64) * 64 * 128
                print(f"  {m:32s} {t * 1e3:8.1f} us  {unique / t / 1e6:7.0f} GB/s of unique bytes,"
                      f" {into_sms / t / 1e6:7.0f} GB/s into SMs ({into_sms / 1e6:.0f} MB)")


def main() -> None:
    backend, arch = current_target()
    names = [f"tma_ring<{s}, {br}, {nb}>" for s, br, nb, _, _ in CONFIGS.values()]
    module = cupy.RawModule(code=SOURCE, options=compile_options(backend, arch),
                            name_expressions=sorted(set(names)) + ["tma_units<3>"])
    ldg = cupy.RawModule(code=LDG_SOURCE, options=("-std=c++17",), name_expressions=["read_pattern<0>"])
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    ctas = props["multiProcessorCount"]
    # 6 sets of 320 rows a CTA at share 1: every config's set (128, 160 or 320 rows) divides it into
    # whole rounds of the grid, and so do hbm_pattern's 192-row blocks
    total_rows = ctas * 6 * 320
    buf = cupy.random.randint(0, 2**31, size=total_rows * COLS // 2, dtype=cupy.int32)
    nbytes = buf.nbytes
    sink = cupy.zeros(1, cupy.uint32)
    runs = {}
    for (name, (s, br, nb, share, promote)), kname in zip(CONFIGS.items(), names):
        k = module.get_function(kname)
        smem = s * br * 128 * nb + 1024
        k.max_dynamic_shared_size_bytes = smem
        tmap = encode(buf.data.ptr, total_rows, br, promote)
        sets = total_rows // (br * nb)
        grid = ctas - ctas % share
        runs[name] = (lambda k=k, smem=smem, tmap=tmap, sets=sets, share=share, grid=grid:
                      k((grid,), (160,), (tmap, np.int32(sets), np.int32(COLS // 64), np.int32(share), sink),
                        shared_mem=smem))
    ldg_k = ldg.get_function("read_pattern<0>")
    runs["ldg stream (hbm_pattern)"] = lambda: ldg_k((ctas,), (384,), (buf, np.int64(total_rows), sink))
    ms = interleaved_ms(runs)
    print(f"{props['name'].decode()}, {ctas} CTAs, {nbytes / 2**20:.0f} MiB of 4 KB bf16 rows, each read once from DRAM")
    for m, t in ms.items():
        print(f"  {m:28s} {t:7.3f} ms  {nbytes / t / 1e6:7.0f} GB/s")
    grouped_stream(module, ctas, sink)

if __name__ == "__main__":
    main()
