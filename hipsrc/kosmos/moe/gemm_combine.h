// The experts' second GEMM and the combine in one launch (the paper's GEMM2 || combine): builder
// CTAs compute y = h W2^T over the local experts (grouped TN, bf16, in the arena's order), counting
// each tile row's finished tiles (gemm::EpiTileRowDone); mover CTAs push each item of an (expert,
// source) run home as soon as the tile rows under it are done (combine.h), and builders join the
// movers once the tile queue is dry (their shared memory turns from the pipeline into the movers'
// tables: one-way); then every CTA folds.
#pragma once
#include "../gemm/ready.h"
#include "../gemm/tile.h"
#include "combine.h"

namespace kosmos {
namespace moe {

// Grid: one CTA per SM (all resident), gemm::kThreads threads, the builder's shared memory; CTAs
// [0, movers) push from the start. words: the tile queue; rows_done: finished tiles per tile row,
// zeroed on the stream before each launch (at least as many as the tile rows the arena can hold).
// PushUnroll: the movers' vectors in flight per thread.
template <class Tile, int PushUnroll, class Epi>
KOSMOS_DEVICE void gemm2_combine(const gemm::TensorMap& tma, const gemm::TensorMap& tmb, const gemm::Problem& p,
                                 const Epi& epi, const CombineParams& d, i32 movers, i32 rows_cap, u64* words,
                                 u64* done_now) {
  extern __shared__ __align__(16) u8 smem[];
  __shared__ gemm::GroupTable table;
  if (!combine_skipped(d)) {
    const bool ok = gemm::build_group_table(
        &table, [&](i32 l) { return i32(expert_rows(d.all_counts, d.world, d.experts, d.e_loc, d.rank, l)); }, d.e_loc,
        rows_cap);
    if (ok) {
      bool go = true;
      if (i32(blockIdx.x) >= movers) {
        gemm::builder_init(smem);
        const gemm::GroupedSchedule<gemm::LAYOUT_TN, Tile> sched{p, &table};
        gemm::QueueClaim claim{words, sched.units()};
        go = gemm::run_builder<gemm::LAYOUT_TN>(sched, &tma, &tmb, smem, claim, gemm::AlwaysReady{},
                                                gemm::EpiTileRowDone<Epi>(epi, done_now, &table));
        __syncthreads();  // the pipeline's shared memory becomes the movers' tables
      }
      const CombineTables m = combine_tables(d, d.all_counts);
      // an item's rows are final once every tile row under them has all its tiles
      const gemm::GroupRowsDone ready{done_now, &table, u64(p.tiles_n), d.wait};
      if (go && combine_push<PushUnroll>(d, m, ready)) combine_fold<4>(d, m);
    }
  }
  gemm::queue_exit(words);
}

}  // namespace moe
}  // namespace kosmos
