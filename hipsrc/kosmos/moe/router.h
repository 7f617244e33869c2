// The routing as the MoE forward megakernel's first phases (forward.h), the same steps as the
// standalone kernels of hipsrc/moe_route.hip (route.h's rule, plan.h's counting sort), so the two
// give the same bits:
//   1. every CTA builds router GEMM tiles: logits = x Wr^T in fp32 (a builder call of its own; at
//      small token counts each tile's K is split (kosmos/moe/route.py router_splits) and, after a
//      grid barrier, the partials are summed into the logits);
//   2. grid barrier; CTA b routes chunks b, b + grid, ... (kChunk tokens each, kRouteLanes lanes a
//      token, kRoundChunks chunks at once) and counts each chunk's pairs per expert (+ the loss
//      partials) (route_rounds.h route_chunks);
//   3. grid barrier; every CTA sums the counts itself (cheaper than one more barrier) and places
//      the pairs of its own run of chunks (order, slot); CTA 0 writes start (plan.h place_chunks);
//   4. under token dropping (capacity >= 0), grid barrier and each expert keeps its `capacity`
//      pairs of highest weight (capacity.h: the plan of step 3 compacted over the kept pairs);
//   5. grid barrier: the dispatch may read start and order; the last CTA computes the losses.
// The chunk tables live in the builder's stages, lent between its two calls (gemm/tile.h).
#pragma once
#include "../grid.h"
#include "../trace.h"
#include "../gemm/splitk.h"
#include "capacity.h"
#include "experts.h"
#include "plan.h"
#include "route_rounds.h"

namespace kosmos {
namespace moe {

static_assert(kRouteThreads == gemm::kThreads, "step 2's rounds take the builder's CTA");
static_assert(kRouteScratchBytes <= u32(gemm::kSmemBytesPortable), "the round's tables must fit the lent stages");

// Step 4 (token dropping), all threads of every CTA after every CTA's step 3.
KOSMOS_DEVICE void keep_in_launch(const RouteParams& r, u8* scratch) {
  const i32 E = r.rule.experts;
  i32* start_all = reinterpret_cast<i32*>(scratch);
  const KeepArgs a{start_all, r.all_order, r.weights, r.order, r.slot, r.kept, r.start, E, r.capacity,
                   r.tokens * r.rule.top_k, 0};
  keep_capacity(a, start_all + place_words(E), CtaPhases::here());  // (place_chunks' words first)
}

// After the last step, on the grid's last CTA (it owns the fewest chunks; the dispatch's CTA 0 must not
// wait for this): mean_prob and the losses, in the standalone scan's order (the same bits). The
// start[] of step 3 is still in the lent stages.
KOSMOS_DEVICE void route_losses(const RouteParams& r, const u8* scratch) {
  const i32 E = r.rule.experts, T = r.tokens, chunks = chunks_of(T);
  if (!r.prob_sums || T == 0 || blockIdx.x != gridDim.x - 1) return;
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x))
    r.mean_prob[e] = expert_mean_prob(e, E, chunks, T, r.prob_sums);
  __syncthreads();
  if (threadIdx.x == 0) {
    const RouterLosses l = router_losses(E, T, r.rule.top_k, reinterpret_cast<const i32*>(scratch), r.mean_prob,
                                         r.lse_sq, chunks, r.aux_coef, r.z_coef);
    r.losses[0] = l.aux;
    r.losses[1] = l.z;
  }
  __syncthreads();
}

// Step 1's second half under split-K (the router GEMM's tiles stored `splits` fp32 partials, rows
// padded to whole tiles: epi.mo rows apart): the logits are the partials added in split order by
// gemm::splitk_reduce, as the device path's router GEMM adds them (the same bits). All threads of
// every CTA, between grid barriers; the first T rows of ld columns.
template <class Epi>
KOSMOS_DEVICE void sum_router_partials(const Epi& epi, i32 splits, const RouteParams& r) {
  float* logits = r.logits;  // epi.ldo == r.ld
  gemm::splitk_reduce(epi.out, i64(r.tokens) * r.ld, splits, i64(epi.mo) * epi.ldo,
                      [&](i64 v, const float4& a) { *reinterpret_cast<float4*>(logits + v) = a; });
}

// All threads of every CTA, first thing in the launch (after gemm::builder_init): steps 1-5. The
// router GEMM's units come from queue[0..1] (the kernel's last CTA out resets it: queue_exit).
// totals_known: place_chunks'. False: a grid wait gave up (nothing after it may run). With
// r.tokens < 0, nothing runs.
template <class Tile, class Epi, class TotalsKnown>
KOSMOS_DEVICE bool route_in_launch(const RouteParams& r, const ExpertGemm& g, const Epi& epi, u64* queue,
                                   const WaitCtx& w, u8* smem, const TotalsKnown& totals_known) {
  if (r.tokens < 0) return true;
  const gemm::DenseSchedule<Tile> s{*g.p};
  gemm::QueueClaim claim{queue, gemm::work_units(*g.p)};
  const gemm::AlwaysReady always;
  gemm::run_builder_jobs(smem, gemm::builder_job<gemm::LAYOUT_TN>(s, g.a, g.b, claim, always, epi));
  phase_mark(12);
  if (!grid_barrier(r.grid, w)) return false;
  phase_mark(16);
  if (gemm::k_splits_of(*g.p) > 1) {
    sum_router_partials(epi, gemm::k_splits_of(*g.p), r);
    if (!grid_barrier(r.grid, w)) return false;
  }
  phase_mark(17);
  route_chunks(r, smem, gemm::lendable_bytes(smem));
  phase_mark(13);
  if (!grid_barrier(r.grid, w)) return false;
  place_chunks(r, smem, totals_known);
  phase_mark(14);
  if (!grid_barrier(r.grid, w)) return false;
  if (r.capacity >= 0) {
    keep_in_launch(r, smem);
    phase_mark(15);
    if (!grid_barrier(r.grid, w)) return false;
  }
  route_losses(r, smem);
  return true;
}

}  // namespace moe
}  // namespace kosmos
