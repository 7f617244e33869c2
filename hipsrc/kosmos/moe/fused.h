// What the MoE layer's fused launches share (hipsrc/moe_fused_forward.hip, moe_fused_backward_f32.hip,
// moe_fused_backward_bf16.hip: a file a kernel, so that they compile in parallel, each without the
// others' code: one file of all three took ~45-100 s of NVRTC on the GPU hosts).
#pragma once

// A mover CTA here has the builder's register budget: 16 vectors in flight per thread.
#ifndef KOSMOS_MOE_PUSH_UNROLL
#define KOSMOS_MOE_PUSH_UNROLL 16
#endif

// The experts' part of the MoE backward in one launch (backward.h) as kernel NAME, its weight
// gradients (B, D, the shared MLP's) through EPI_W (EpiStoreF32 or EpiStoreBf16): the maps, problem
// and epilogue of A (dgrad2 + SwiGLU backward), B (wgrad2), C (dgrad1), D (wgrad1), the shared MLP's
// four job records and the router's backward (in global memory), then the backward dispatch's and
// the combine's records. (Names unqualified: the including file opens kosmos, gemm and moe.)
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
