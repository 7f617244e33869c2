// Grouped GEMMs over ragged groups (the MoE expert GEMMs): one persistent launch over every
// group, with the group row counts read from device memory (no host round trip).
//
//   TN   Y[r]  = X[r] W[e]^T  for the rows r of group e   (forward; SwiGLU epilogue optional)
//   NN   dX[r] = dY[r] W[e]                                (dgrad; the SwiGLU backward epilogue optional)
//   NT   dW[e] = dY_e^T X_e   over the rows of group e     (wgrad: the ragged dimension is the reduction)
//
// Rows of all groups are packed expert-major; group e owns rows [start_e, start_e + count_e).
// Grid = SMs (or a cap), kThreads threads, kSmemBytes of dynamic shared memory, like gemm.hip.
// words[0] is the queue head, words[1] counts CTAs out (the last one resets both for the next
// launch, since only the device knows how many tiles there were), words[2] the launch's status:
// 0, 1 + a group with a negative count, or -1 when a count or their sum is past rows_cap.
#include "kosmos/gemm/ready.h"
#include "kosmos/gemm/tile.h"

using namespace kosmos;
using namespace kosmos::gemm;

template <int L, class Tile, class Epi, class Ready = AlwaysReady>
KOSMOS_DEVICE void grouped_gemm(const TensorMap& tma, const TensorMap& tmb, const Problem& p, const Epi& epi,
                                const i32* group_rows, i32 groups, i32 rows_cap, u64* words,
                                const Ready& ready = Ready{}) {
  extern __shared__ __align__(16) u8 smem[];
  __shared__ GroupTable table;
  builder_init(smem);
  const bool ok = build_group_table(&table, group_rows, groups, rows_cap);
  if (blockIdx.x == 0 && threadIdx.x == 0) words[2] = u64(i64(table.bad));
  if (ok) {
    const GroupedSchedule<L, Tile> sched{p, &table};
    if constexpr (Ready::kTrivial) {  // every unit ready: the CTA's own first (GridFirstClaim)
      GridFirstClaim claim{words, sched.units()};
      run_builder<L>(sched, &tma, &tmb, smem, claim, ready, epi);
    } else {
      QueueClaim claim{words, sched.units()};
      run_builder<L>(sched, &tma, &tmb, smem, claim, ready, epi);
    }
  }
  queue_exit(words);
}

#define KOSMOS_GROUPED_KERNEL_TILE(NAME, LAYOUT, EPI, MAKE_EPI, TILE)                                      \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                              \
      NAME(const KOSMOS_GRID_CONSTANT TensorMap tma, const KOSMOS_GRID_CONSTANT TensorMap tmb,             \
           const KOSMOS_GRID_CONSTANT TensorMap tmc, Problem p, EPI epi, const i32* __restrict__ group_rows, \
           i32 groups, i32 rows_cap, u64* words) {                                                         \
    grouped_gemm<LAYOUT, TILE>(tma, tmb, p, MAKE_EPI, group_rows, groups, rows_cap, words);                \
  }
#define KOSMOS_GROUPED_KERNEL(NAME, LAYOUT, EPI, MAKE_EPI) \
  KOSMOS_GROUPED_KERNEL_TILE(NAME, LAYOUT, EPI, MAKE_EPI, DefaultTile)

#define KOSMOS_EPI_AS_IS epi
#define KOSMOS_EPI_TMA EpiQuad<EpiStoreBf16Tma>(EpiStoreBf16Tma(epi, &tmc))
#define KOSMOS_EPI_TMA32 EpiQuad<EpiStoreF32Tma>(EpiStoreF32Tma(epi, &tmc))

KOSMOS_GROUPED_KERNEL(kosmos_grouped_tn_bf16, LAYOUT_TN, EpiStoreBf16, KOSMOS_EPI_TMA)
KOSMOS_GROUPED_KERNEL(kosmos_grouped_tn_swiglu, LAYOUT_TN, EpiSwiGLU, KOSMOS_EPI_AS_IS)
KOSMOS_GROUPED_KERNEL(kosmos_grouped_nn_bf16, LAYOUT_NN, EpiStoreBf16, KOSMOS_EPI_TMA)
KOSMOS_GROUPED_KERNEL(kosmos_grouped_nn_swiglu_bwd, LAYOUT_NN, EpiSwiGLUBackward, KOSMOS_EPI_AS_IS)
KOSMOS_GROUPED_KERNEL(kosmos_grouped_nt_bf16, LAYOUT_NT, EpiStoreBf16, KOSMOS_EPI_TMA)
KOSMOS_GROUPED_KERNEL(kosmos_grouped_nt_f32, LAYOUT_NT, EpiStoreF32, KOSMOS_EPI_TMA32)

// 128x192 and 128x128 tiles (Hopper only): more tiles for few, short groups; the 128-wide ping-pong.
#if KOSMOS_GEMM_WGMMA
#define KOSMOS_GROUPED_NARROW(SUFFIX, TILE)                                                                       \
  KOSMOS_GROUPED_KERNEL_TILE(kosmos_grouped_tn_bf16_##SUFFIX, LAYOUT_TN, EpiStoreBf16, KOSMOS_EPI_TMA, TILE)      \
  KOSMOS_GROUPED_KERNEL_TILE(kosmos_grouped_nn_bf16_##SUFFIX, LAYOUT_NN, EpiStoreBf16, KOSMOS_EPI_TMA, TILE)      \
  KOSMOS_GROUPED_KERNEL_TILE(kosmos_grouped_nt_bf16_##SUFFIX, LAYOUT_NT, EpiStoreBf16, KOSMOS_EPI_TMA, TILE)      \
  KOSMOS_GROUPED_KERNEL_TILE(kosmos_grouped_nt_f32_##SUFFIX, LAYOUT_NT, EpiStoreF32, KOSMOS_EPI_TMA32, TILE)
KOSMOS_GROUPED_NARROW(n192, MidTile)
KOSMOS_GROUPED_NARROW(n128, PingPongTile)  // a warpgroup a 128 x 128 tile (builder_wgmma.h consume_pingpong)
#endif

// The readiness hook MoE movers release rows through (RunsArrived), exercised standalone: group e
// is `runs` runs of run_rows[e * runs + s] rows; a tile waits for the runs its rows overlap
// (arrived[e * runs + s] >= target); finished tiles are counted in *tiles_done.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    kosmos_grouped_tn_bf16_gated(const KOSMOS_GRID_CONSTANT TensorMap tma, const KOSMOS_GRID_CONSTANT TensorMap tmb,
                                 const KOSMOS_GRID_CONSTANT TensorMap tmc, Problem p, EpiStoreBf16 epi,
                                 const i32* __restrict__ group_rows, i32 groups, i32 rows_cap, u64* words,
                                 const i32* __restrict__ run_rows, i32 runs, const u64* arrived, u64 target, WaitCtx w,
                                 u64* tiles_done) {
  grouped_gemm<LAYOUT_TN, DefaultTile>(tma, tmb, p, EpiCountDone<EpiStoreBf16Tma>(EpiStoreBf16Tma(epi, &tmc), tiles_done),
                                       group_rows, groups, rows_cap, words,
                                       RunsArrived<LAYOUT_TN>{run_rows, runs, 1, arrived, runs, target, runs, w});
}
