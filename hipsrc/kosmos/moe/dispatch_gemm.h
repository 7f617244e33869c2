// The MoE dispatch and the experts' first GEMM in one launch (the paper's Dispatch || GEMM1):
// CTAs [0, movers) push token rows into the owners' arenas (dispatch.h), the other CTAs start
// building at once, each GEMM1 tile waiting only for the (expert, source) runs its rows overlap
// (gemm::RunsArrived on the arrival flags); movers become builders once the push queue is dry
// (one-way). Every non-empty run is waited for by some tile, so at exit the arena is complete.
//
// Shared memory: every CTA keeps this call's counts (movers: and the layout) in the dynamic shared
// memory until the group table is built; then it becomes the pipeline. The tiles' readiness hook
// reads its runs' counts from the heap slot (a few per tile).
#pragma once
#include "../gemm/ready.h"
#include "../gemm/tile.h"
#include "dispatch.h"

namespace kosmos {
namespace moe {

// Grid: one CTA per SM (all resident), gemm::kThreads threads, the builder's shared memory;
// movers >= 1 (CTA 0 publishes the counts). words: the tile queue (gemm::queue_exit).
// PushUnroll: the movers' vectors in flight per thread (cta_copy_rows).
template <class Tile, int PushUnroll, class Epi>
KOSMOS_DEVICE void dispatch_gemm1(const gemm::TensorMap& tma, const gemm::TensorMap& tmb, const gemm::Problem& p, const Epi& epi,
                                  const DispatchParams& d, i32 movers, u64* words) {
  extern __shared__ __align__(16) u8 smem[];
  __shared__ gemm::GroupTable table;
  // Movers leave the counts at the start of the dynamic shared memory (dispatch_push); builders load
  // them there (it is free until builder_init), so neither reads the heap one value at a time.
  i32* counts = reinterpret_cast<i32*>(smem);
  const bool go = i32(blockIdx.x) < movers ? dispatch_push<PushUnroll>(d) : wait_counts(d) && load_counts(d, counts) == 0;
  if (go) {
    const bool ok = gemm::build_group_table(
        &table, [&](i32 l) { return i32(expert_rows(counts, d.world, d.experts, d.e_loc, d.rank, l)); }, d.e_loc,
        i32(d.capacity));
    __syncthreads();  // the counts' shared memory becomes the pipeline
    gemm::builder_init(smem);
    if (ok) {
      const gemm::GroupedSchedule<gemm::LAYOUT_TN, Tile> sched{p, &table};
      gemm::QueueClaim claim{words, sched.units()};
      // run (l, s): rows slot[s * E + col + l] (the heap slot: the pipeline has the shared memory
      // now), flag arrived[l * kMaxWorld + s]
      const gemm::RunsArrived<gemm::LAYOUT_TN> ready{counts_slot(d, d.rank, 0) + d.rank * d.e_loc, 1, d.experts,
                                                     arrived_flag(d, d.rank, 0, 0), kMaxWorld, call_epoch(), d.world,
                                                     d.wait};
      gemm::run_builder<gemm::LAYOUT_TN>(sched, &tma, &tmb, smem, claim, ready, epi);
    }
  }
  gemm::queue_exit(words);
}

}  // namespace moe
}  // namespace kosmos
