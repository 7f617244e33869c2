// The steps the MoE megakernels (forward.h, backward.h) share around their builder call: the
// dispatch (movers push rows, everyone learns the group table), the readiness of (expert, source)
// runs, and the combine with the fold.
//
// Shared memory: the dispatch's counts (movers: and their tables) at the start of the dynamic
// shared memory until the group table is built, then the builder's pipeline, then the combine's
// tables. Two plans, two epochs: the dispatch's (CallScope 0) and the combine's (CallScope 1).
#pragma once
#include "../gemm/ready.h"
#include "../gemm/tile.h"
#include "../trace.h"
#include "combine.h"
#include "dispatch.h"

namespace kosmos {
namespace moe {

// The dynamic shared memory the movers stage rows in (bulk_rows.h; session 13: 2x the register
// loop's rate, notes/moe.md): everything before the builder's pipeline state, whose mbarriers stay
// valid from builder_init on (a review found the combine's staging over them; harmless while no
// builder call follows the combine, but undefined). 0 (no bulk copies): register copies.
KOSMOS_DEVICE u32 mover_stage_bytes(u8* smem) { return gemm::kArchPath == 1 ? gemm::lendable_bytes(smem) : 0u; }

// One grouped GEMM of a megakernel: its operand maps and problem (the epilogue comes apart).
struct ExpertGemm {
  const gemm::TensorMap* a;
  const gemm::TensorMap* b;
  const gemm::Problem* p;
};

// All threads, first: CTAs [0, movers) push this rank's rows (dispatch.h), the others wait for every
// rank's counts; both load the counts into the dynamic shared memory and build the local experts'
// group table. CTA 0 plans the items either way (with movers 0 nobody pushes here: the builder
// call's side job does, SideDispatch). False: a wait gave up, or the verdict (the same on every rank) stopped
// the call -- nothing moved. On return the dynamic shared memory is free for the builder's pipeline.
// publish false: the launch has published this rank's counts already (dispatch_plan).
template <int PushUnroll>
KOSMOS_DEVICE bool dispatch_rows(const DispatchParams& d, i32 movers, u8* smem, gemm::GroupTable* table,
                                 bool publish = true) {
  i32* counts = reinterpret_cast<i32*>(smem);
  // Movers leave the counts at the start of the dynamic shared memory (dispatch_plan); builders
  // load them there, so neither reads the heap one value at a time.
  bool fine;
  if (i32(blockIdx.x) < movers) fine = dispatch_push<PushUnroll>(d, mover_stage_bytes(smem), publish);
  else if (blockIdx.x == 0) fine = dispatch_plan(d, publish);
  else fine = wait_counts(d) && load_counts(d, counts) == 0;
  fine = fine && gemm::build_group_table(
                     table, [&](i32 l) { return i32(expert_rows(counts, d.world, d.experts, d.e_loc, d.rank, l)); },
                     d.e_loc, i32(d.capacity));
  __syncthreads();  // the counts' shared memory becomes the pipeline
  return fine;
}

// Whether the builder call's idle warps push the dispatch beside it (SideDispatch): always on
// Hopper; elsewhere (side work runs before the jobs, no warp is idle) only when no CTA moves.
// kosmos/moe/forward.py side_pushes mirrors it (the item size follows).
KOSMOS_DEVICE bool side_pushes(i32 movers) { return gemm::kArchPath == 1 || movers == 0; }

// The readiness of a job reading the dispatch arena: run (l, s) is rows slot[s * E + col + l] (the
// heap slot: the pipeline has the shared memory now), its flag arrived[l * kMaxWorld + s].
template <int L>
KOSMOS_DEVICE gemm::RunsArrived<L> runs_arrived(const DispatchParams& d) {
  return gemm::RunsArrived<L>{counts_slot(d, d.rank, 0) + d.rank * d.e_loc, 1, d.experts, arrived_flag(d, d.rank, 0, 0),
                              kMaxWorld, call_epoch(0), d.world, d.wait};
}

// All threads, after the builder call (fine: it finished): push the combine's rows home once every
// tile row under them has `tiles_n` finished tiles (rows_done), then the fold, once fold_ready()
// (all threads call it; thread 0 may wait: what the fold reads beside the rows, c.shared).
template <int PushUnroll, class FoldReady>
KOSMOS_DEVICE void combine_rows(bool fine, const CombineParams& c, const DispatchParams& d,
                                const gemm::GroupTable* table, const u64* rows_done, u64 tiles_n,
                                const FoldReady& fold_ready) {
  __syncthreads();  // the pipeline's shared memory becomes the combine's tables
  if (!fine) return;
  const CombineTables m = combine_tables(c, counts_slot(d, d.rank, 0));
  const gemm::GroupRowsDone ready{rows_done, table, tiles_n, c.wait};
  extern __shared__ __align__(16) u8 smem[];
  if (!combine_push<PushUnroll>(c, m, ready, mover_stage_bytes(smem))) return;
  phase_mark(10);
  if (!fold_ready()) return;
  combine_fold<4>(c, m);
}

// All threads, last thing: the last CTA out of the launch zeroes rows_done[0, n) for the next one
// (nobody reads them any more), so no memset launch precedes a call.
KOSMOS_DEVICE void zero_when_last_out(u64* out, u64* rows_done, i32 n) {
  __shared__ int s_last;
  const int last = last_cta_out(out) ? 1 : 0;
  if (threadIdx.x == 0) s_last = last;
  __syncthreads();
  if (s_last)
    for (i32 v = threadIdx.x; v < n; v += blockDim.x) rows_done[v] = 0;
}

}  // namespace moe
}  // namespace kosmos
