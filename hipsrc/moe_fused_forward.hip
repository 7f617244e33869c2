// The MoE layer's fused forward (MoEForward): the experts' forward from the router to the fold in one
// launch (hipsrc/kosmos/moe/forward.h). The backward's launches: moe_fused_backward_*.hip.
#include "kosmos/moe/forward.h"
#include "kosmos/moe/fused.h"

using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::moe;

// The router GEMM's maps, problem and epilogue and the routing's record (tokens < 0: the routing
// came with the call), then GEMM1's, GEMM2's, the shared MLP's two (tiles_m 0: none), then both
// plans' records.
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
