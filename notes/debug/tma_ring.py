"""What a TMA ring reaches streaming 4 KB rows, beside a plain-load stream of the same bytes.

Session 30 (notes/moe.md): with its MMAs removed (no_mma.patch) the grouped GEMM at 256 rows per
expert is no faster, so its ~2.0 TB/s of DRAM is what its TMA ring delivers (4 stages of 40 KB a
CTA: 5 boxes of 64 rows x 128 B, 128-byte swizzle, 256 B L2 promotion), where plain loads of the
same rows reach ~3.07 TB/s (hbm_pattern.py). This kernel is that ring alone: one producer thread
issues a stage's boxes when the stage is free, 4 consumer warps release each stage as it lands.
A "set" is `rows` consecutive rows of a bf16 [*, 2048] tensor read 64 columns (128 B) a stage, as
a GEMM tile reads its weight rows slab by slab; CTAs take sets round robin; with share 2 two
neighbouring CTAs read every set (the two row tiles of an expert reading the same weights).
Every config reads the same ~1 GB once from DRAM (share 2 twice into SMs); GB/s = unique bytes /
time. Median of 15 timings of 3 back-to-back launches each (events), configs interleaved.

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
#include "kosmos/gemm/sm90_wgmma.h"
using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::gemm::sm90;

// A stage = NB boxes of BR rows x 64 bf16 (128 B a row).
template <int S, int BR, int NB>
__global__ void __launch_bounds__(160, 1) tma_ring(const KOSMOS_GRID_CONSTANT TensorMap map, int sets, int k_slabs,
                                                   int share, unsigned* sink) {
  constexpr int kStage = BR * 128 * NB;
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[S], empty[S];
  unsigned char* base = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 4);
    }
    mbar_fence_init();
  }
  __syncthreads();
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
"""

COLS = 2048  # 4 KB bf16 rows, the Qwen3-30B fwd1 weights' K
# name: (stages, box rows, boxes a stage, share, L2 promotion bytes)
CONFIGS = {
    "gemm 4 x 5x64": (4, 64, 5, 1, 256),         # the grouped GEMM's ring (tile 192: A 2 boxes + B 3)
    "gemm 4 x 5x64 share2": (4, 64, 5, 2, 256),  # ... its weight rows read by two CTAs
    "4 x 5x64 promote128": (4, 64, 5, 1, 128),   # L2 fills of 128 B (the map's promotion)
    "4 x 5x64 promote0": (4, 64, 5, 1, 0),       # no promotion
    "4 x 2x160": (4, 160, 2, 1, 256),            # same bytes, 2 larger boxes a stage
    "8 x 1x160": (8, 160, 1, 1, 256),            # 20 KB stages, one box each, twice as many
    "8 x 2x64": (8, 64, 2, 1, 256),              # 16 KB stages, twice as many
    "5 x 5x64": (5, 64, 5, 1, 256),              # 200 KB in flight
    "2 x 5x64": (2, 64, 5, 1, 256),              # 80 KB in flight
}
BACK_TO_BACK = 3


def encode(ptr: int, rows: int, box_rows: int, promote: int) -> np.void:
    """kosmos.gemm.encode_tmap's bf16 map of [rows, COLS] (boxes of box_rows x 64, 128-byte
    swizzle) with the L2 promotion a parameter (the library's is always 256 B)."""
    from cuda.bindings import driver as cu

    p = cu.CUtensorMapL2promotion
    res, tm = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr,
        [cu.cuuint64_t(COLS), cu.cuuint64_t(rows)], [cu.cuuint64_t(COLS * 2)],
        [cu.cuuint32_t(64), cu.cuuint32_t(box_rows)], [cu.cuuint32_t(1)] * 2,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        {256: p.CU_TENSOR_MAP_L2_PROMOTION_L2_256B, 128: p.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
         0: p.CU_TENSOR_MAP_L2_PROMOTION_NONE}[promote],
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if res != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {res}")
    rec = np.zeros(1, gemm.TMAP_DTYPE)
    rec["words"][0] = np.array([int(w) for w in tm.opaque], dtype=np.uint64)
    return rec[0]


def main() -> None:
    backend, arch = current_target()
    names = [f"tma_ring<{s}, {br}, {nb}>" for s, br, nb, _, _ in CONFIGS.values()]
    module = cupy.RawModule(code=SOURCE, options=compile_options(backend, arch), name_expressions=sorted(set(names)))
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
    times = {m: [] for m in runs}
    for it in range(17):
        for m, fn in runs.items():
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            for _ in range(BACK_TO_BACK):
                fn()
            b.record()
            b.synchronize()
            if it >= 2:
                times[m].append(cupy.cuda.get_elapsed_time(a, b) / BACK_TO_BACK)
    print(f"{props['name'].decode()}, {ctas} CTAs, {nbytes / 2**20:.0f} MiB of 4 KB bf16 rows, each read once from DRAM")
    for m in runs:
        t = statistics.median(times[m])
        print(f"  {m:28s} {t:7.3f} ms  {nbytes / t / 1e6:7.0f} GB/s")


if __name__ == "__main__":
    main()
