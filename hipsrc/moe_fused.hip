// The MoE layer's fused launches: the experts' forward (kosmos_moe_forward, MoEForward) and backward
// (kosmos_moe_backward_*, MoEBackward) from the dispatch to the fold in one launch each.
#include "kosmos/moe/backward.h"
#include "kosmos/moe/forward.h"

using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::moe;

// A mover CTA here has the builder's register budget: 16 vectors in flight per thread.
#ifndef KOSMOS_MOE_PUSH_UNROLL
#define KOSMOS_MOE_PUSH_UNROLL 16
#endif

// The MoE forward in one launch (hipsrc/kosmos/moe/forward.h): the router GEMM's maps, problem and
// epilogue and the routing's record (tokens < 0: the routing came with the call), then GEMM1's,
// GEMM2's, the shared MLP's two (tiles_m 0: none), then both plans' records.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    kosmos_moe_forward(const KOSMOS_GRID_CONSTANT TensorMap tmar, const KOSMOS_GRID_CONSTANT TensorMap tmbr,
                       const KOSMOS_GRID_CONSTANT TensorMap tmcr, Problem pr, EpiStoreF32 epir,
                       const KOSMOS_GRID_CONSTANT RouteParams route,
                       const KOSMOS_GRID_CONSTANT TensorMap tma1, const KOSMOS_GRID_CONSTANT TensorMap tmb1,
                       const KOSMOS_GRID_CONSTANT TensorMap tmc1, Problem p1, EpiSwiGLU epi1,
                       const KOSMOS_GRID_CONSTANT TensorMap tma2, const KOSMOS_GRID_CONSTANT TensorMap tmb2,
                       const KOSMOS_GRID_CONSTANT TensorMap tmc2, Problem p2, EpiStoreBf16 epi2,
                       const KOSMOS_GRID_CONSTANT TensorMap tmas1, const KOSMOS_GRID_CONSTANT TensorMap tmbs1,
                       const KOSMOS_GRID_CONSTANT TensorMap tmcs1, Problem ps1, EpiSwiGLU epis1,
                       const KOSMOS_GRID_CONSTANT TensorMap tmas2, const KOSMOS_GRID_CONSTANT TensorMap tmbs2,
                       const KOSMOS_GRID_CONSTANT TensorMap tmcs2, Problem ps2, EpiStoreF32 epis2,
                       const KOSMOS_GRID_CONSTANT DispatchParams d, const KOSMOS_GRID_CONSTANT CombineParams c,
                       i32 movers, i32 crew, i32 rows_cap, u64* words, u64* rows_done) {
  const CallScope dispatch_call(d.calls, 0), combine_call(c.calls, 1);
  // GEMM2's and dgrad1's tiles that end inside an expert's rows store from registers: as 16-byte runs
  // (EpiQuad; the other epilogues' register paths cost spills that way)
  forward_experts<DefaultTile, KOSMOS_MOE_PUSH_UNROLL>(ExpertGemm{&tmar, &tmbr, &pr}, EpiStoreF32Tma(epir, &tmcr), route,
                                                       ExpertGemm{&tma1, &tmb1, &p1}, epi1, ExpertGemm{&tma2, &tmb2, &p2},
                                                       EpiQuad<EpiStoreBf16Tma>(EpiStoreBf16Tma(epi2, &tmc2)),
                                                       ExpertGemm{&tmas1, &tmbs1, &ps1}, epis1,
                                                       ExpertGemm{&tmas2, &tmbs2, &ps2}, EpiStoreF32Tma(epis2, &tmcs2), d, c,
                                                       movers, crew, rows_cap, words, rows_done);
}

// The experts' part of the MoE backward in one launch (hipsrc/kosmos/moe/backward.h): the maps,
// problem and epilogue of A (dgrad2 + SwiGLU backward), B (wgrad2), C (dgrad1), D (wgrad1), the
// shared MLP's four job records and the router's backward (in global memory), then the backward
// dispatch's and the combine's records. The weight gradients (B, D, the shared MLP's) in fp32 or bf16.
#define KOSMOS_MOE_BACKWARD_KERNEL(NAME, EPI_W)                                                                   \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                                     \
      NAME(const KOSMOS_GRID_CONSTANT TensorMap tma_a, const KOSMOS_GRID_CONSTANT TensorMap tmb_a,                \
           const KOSMOS_GRID_CONSTANT TensorMap tmc_a, Problem pa, EpiSwiGLUBackward epi_a,                      \
           const KOSMOS_GRID_CONSTANT TensorMap tma_b, const KOSMOS_GRID_CONSTANT TensorMap tmb_b,                \
           const KOSMOS_GRID_CONSTANT TensorMap tmc_b, Problem pb, EPI_W epi_b,                                  \
           const KOSMOS_GRID_CONSTANT TensorMap tma_c, const KOSMOS_GRID_CONSTANT TensorMap tmb_c,                \
           const KOSMOS_GRID_CONSTANT TensorMap tmc_c, Problem pc, EpiStoreBf16 epi_c,                           \
           const KOSMOS_GRID_CONSTANT TensorMap tma_d, const KOSMOS_GRID_CONSTANT TensorMap tmb_d,                \
           const KOSMOS_GRID_CONSTANT TensorMap tmc_d, Problem pd, EPI_W epi_d,                                  \
           const SharedBackward<EPI_W>* __restrict__ shared, const RouterBackward* __restrict__ router,          \
           const KOSMOS_GRID_CONSTANT DispatchParams d,                                                           \
           const KOSMOS_GRID_CONSTANT CombineParams c, i32 movers, i32 crew, i32 rows_cap, u64* words,            \
           u64* rows_done) {                                                                                      \
    const CallScope dispatch_call(d.calls, 0), combine_call(c.calls, 1);                                          \
    backward_experts<DefaultTile, KOSMOS_MOE_PUSH_UNROLL>(                                                         \
        ExpertGemm{&tma_a, &tmb_a, &pa}, epi_a, ExpertGemm{&tma_b, &tmb_b, &pb}, with_tma(epi_b, &tmc_b),         \
        ExpertGemm{&tma_c, &tmb_c, &pc}, EpiQuad<EpiStoreBf16Tma>(EpiStoreBf16Tma(epi_c, &tmc_c)),                \
        ExpertGemm{&tma_d, &tmb_d, &pd}, with_tma(epi_d, &tmc_d), *shared, *router, d, c, movers, crew, rows_cap,  \
        words, rows_done);                                                                                        \
  }
KOSMOS_MOE_BACKWARD_KERNEL(kosmos_moe_backward_f32, EpiStoreF32)
KOSMOS_MOE_BACKWARD_KERNEL(kosmos_moe_backward_bf16, EpiStoreBf16)
