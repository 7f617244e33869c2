// The MoE forward from the router to the fold in one launch (the paper's Figure 6;
// hipsrc/moe_fused_forward.hip kosmos_moe_forward):
//   0. the routing (router.h): the router GEMM, then the routing and the dispatch plan in grid
//      barrier-separated steps -- unless the routing came with the call (RouteParams.tokens < 0);
//   1. dispatch || GEMM1: CTAs [0, movers) push token rows into the owners' arenas (dispatch.h),
//      then build; the others build at once, and the warps each builder leaves idle push from the
//      same queue beside it (SideDispatch). A GEMM1 tile (SwiGLU epilogue) waits only for the
//      (expert, source) runs its rows overlap (gemm::RunsArrived) and counts its tile row when
//      stored (gemm::EpiTileRowDone, rows_done[0, rows_cap)).
//   2. GEMM2 || combine: when GEMM1's queue is dry, CTAs [0, crew) leave for the combine and the
//      others build GEMM2 tiles, each waiting for GEMM1's whole tile row (gemm::TileRowsDone) and
//      counting its own (rows_done[rows_cap, 2 rows_cap)); the crew pushes each item of a run home
//      once the GEMM2 tile rows under it are done (combine.h); builders join the crew when GEMM2's
//      queue is dry (their shared memory turns from the pipeline into the combine's tables).
//   3. fold: every CTA, once every row owed to this rank has arrived (and the shared MLP's output).
// The shared experts' MLP (one SwiGLU MLP on x, local: no communication) runs as jobs of the same
// builder call: its first GEMM (SwiGLU) before GEMM1, needing nothing, so the CTAs build while the
// dispatch lands; its second (fp32 out, which the fold adds) after GEMM2, each tile waiting for the
// first's tiles all done (gemm::CountReached: long done by then); the fold waits for the second's.
// No wait can close a cycle while all CTAs are resident: GEMM1 tiles wait for movers that never
// wait for tiles; GEMM2 tiles for GEMM1 tiles, all of which are claimed (by running CTAs) before
// any CTA leaves GEMM1's queue; the crew for GEMM2 tiles; the shared MLP's second GEMM for its
// first, whose tiles wait for nothing; the fold for those, all claimed before any CTA leaves.
// experts.h has the steps it shares with the backward (the dispatch, the combine, shared memory
// and epochs).
#pragma once
#include "router.h"

namespace kosmos {
namespace moe {

// Grid: one CTA per SM (all resident), gemm::kThreads threads, the builder's shared memory.
// 0 <= movers (0: only the side pushes), 0 <= crew < grid. words[0..1]: GEMM1's queue,
// words[2..3]: GEMM2's, words[4..5]: the router GEMM's, words[6..7] and [8..9]: the shared MLP's
// two, words[10]: CTAs out (for the counters' reset). rows_done: rows_cap counters per expert
// GEMM (at least the tile rows the arena can hold), then the shared GEMMs' finished tiles (2).
// PushUnroll: vectors in flight per mover thread. The expert GEMMs and the shared MLP's run in one
// builder call (one register trade); the router GEMM (gr, epir) is a call before them. A GEMM of
// no tiles (tiles_m 0: no shared MLP, or no tokens) is an empty job.
template <class Tile, int PushUnroll, class EpiR, class Epi1, class Epi2, class EpiS1, class EpiS2>
KOSMOS_DEVICE void forward_experts(const ExpertGemm& gr, const EpiR& epir, const RouteParams& route,
                                   const ExpertGemm& g1, const Epi1& epi1, const ExpertGemm& g2, const Epi2& epi2,
                                   const ExpertGemm& gs1, const EpiS1& epis1, const ExpertGemm& gs2,
                                   const EpiS2& epis2, const DispatchParams& d, const CombineParams& c, i32 movers,
                                   i32 crew, i32 rows_cap, u64* words, u64* rows_done) {
  extern __shared__ __align__(16) u8 smem[];
  __shared__ gemm::GroupTable table;
  phase_mark(0);
  gemm::builder_init(smem);  // once: the router's call and the experts' share the pipeline
  // Dropless, the routing's totals are this rank's counts: the grid's last CTA (it places the
  // fewest chunks) publishes them at once, so the publish's system fence and the peers' wait for
  // them run under the placing and its grid barrier.
  const bool publish_early = route.tokens >= 0 && route.capacity < 0;
  bool fine = route_in_launch<Tile>(route, gr, epir, words + 4, d.wait, smem, [&](const i32* start) {
    if (publish_early && blockIdx.x == gridDim.x - 1)
      publish_counts(d, [&](i32 g) { return start[g + 1] - start[g]; });
  });
  combine_prepare(c);
  fine = fine && dispatch_rows<PushUnroll>(d, movers, smem, &table, !publish_early);
  phase_mark(1);
  if (fine) {
    gemm::builder_reclaim(smem);  // the routing's and the dispatch's tables lay in the stages
    phase_mark(2);
    const gemm::GroupedSchedule<gemm::LAYOUT_TN, Tile> s1{*g1.p, &table};
    gemm::QueueClaim claim1{words, s1.units()};
    const auto arrived = runs_arrived<gemm::LAYOUT_TN>(d);
    const gemm::EpiTileRowDone<Epi1> done1(epi1, rows_done, &table);
    const auto job1 = gemm::builder_job<gemm::LAYOUT_TN>(s1, g1.a, g1.b, claim1, arrived, done1);
    const gemm::GroupedSchedule<gemm::LAYOUT_TN, Tile> s2{*g2.p, &table};
    gemm::QueueClaim claim2{words + 2, s2.units()};
    const gemm::TileRowsDone h_done{rows_done, &table, u64(g1.p->tiles_n), d.wait};
    const gemm::EpiTileRowDone<Epi2> done2(epi2, rows_done + rows_cap, &table);
    const bool builds2 = i32(blockIdx.x) >= crew;
    const auto job2 = gemm::builder_job<gemm::LAYOUT_TN>(s2, g2.a, g2.b, claim2, h_done, done2, builds2);
    // the shared MLP: dense GEMMs on x (S1, SwiGLU) and on its h (S2, fp32 out for the fold)
    u64* shared_done = rows_done + 2 * rows_cap;  // [0]: S1's finished tiles, [1]: S2's
    const gemm::DenseSchedule<Tile> ss1{*gs1.p}, ss2{*gs2.p};
    gemm::QueueClaim claim_s1{words + 6, gemm::work_units(*gs1.p)}, claim_s2{words + 8, gemm::work_units(*gs2.p)};
    const gemm::AlwaysReady always;
    const gemm::EpiCountDone<EpiS1> done_s1(epis1, shared_done);
    const gemm::CountReached s1_done{shared_done, u64(claim_s1.units), d.wait};
    const gemm::EpiCountDone<EpiS2> done_s2(epis2, shared_done + 1);
    const auto job_s1 = gemm::builder_job<gemm::LAYOUT_TN>(ss1, gs1.a, gs1.b, claim_s1, always, done_s1);
    const auto job_s2 = gemm::builder_job<gemm::LAYOUT_TN>(ss2, gs2.a, gs2.b, claim_s2, s1_done, done_s2);
    fine = gemm::run_builder_jobs_beside(smem, SideDispatch{d, side_pushes(movers)}, job_s1, job1, job2, job_s2);
    phase_mark(8);
    // an item's rows are final once every tile row under them has all of GEMM2's tiles; the
    // fold also reads S2's output
    const gemm::CountReached s2_done{shared_done + 1, u64(claim_s2.units), d.wait};
    __shared__ int s_ok;
    combine_rows<PushUnroll>(fine, c, d, &table, rows_done + rows_cap, u64(g2.p->tiles_n), [&] {
      return cta_broadcast(&s_ok, threadIdx.x == 0 ? int(s2_done.reached()) : 1) != 0;
    });
    phase_mark(9);
  } else {
    combine_nan(c);  // after a failed wait too: this rank's call has failed (the host raises)
  }
  for (int q = 0; q < 5; ++q) gemm::queue_exit(words + 2 * q);
  zero_when_last_out(words + 10, rows_done, 2 * rows_cap + 2);
}

}  // namespace moe
}  // namespace kosmos
