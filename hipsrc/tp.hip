// TP+SP fused kernels: one launch each, CTAs switching roles from data readiness.
//
//   AG+TN  (column-parallel fprop)  Y  = allgather(X) W^T       kosmos_tp_ag_tn
//   AG+NN  (row-parallel dgrad)     dX = allgather(dY) W        kosmos_tp_ag_nn
//   bulk AG || NN (col. dgrad)      X_full = allgather(X) beside dX = dY W             kosmos_tp_bulk_ag_nn
//   TN+RS  (row-parallel fprop)     Y  = reduce_scatter(X W^T)  kosmos_tp_tn_rs_{bf16,f32} (staging type)
//   bulk RS || NT (col. wgrad)      dX = reduce_scatter(dX_partial) beside dW = dY^T X kosmos_tp_bulk_rs_nt
//
// Grid: one CTA per SM (or the cap), the GEMM builder's block size and shared memory. CTAs
// [0, movers) start as movers, the rest as builders. Role policy: 0 = one-way (movers become
// builders when their queue is empty; in TN+RS builders become reducers when the GEMM queue
// is empty), 1 = fixed split (nobody switches), 2 = two-way (AG kernels only: besides one-way,
// a builder goes back to moving whenever gather items are left unclaimed at its next claim).
#include "kosmos/gemm/tile.h"
#include "kosmos/tp.h"

using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::tp;

constexpr int kOneWay = 0, kFixed = 1, kTwoWay = 2;

// Builders claim tiles from the plan's order table (entries are tile_of() queue indices; no
// table = the builder's own raster). Two-way: with mover_head set, a claim returns -1 (stop
// building) while gather items remain.
struct TableClaim {
  u64* head;
  const i32* order;
  i32 n;
  const u64* mover_head;
  i32 n_mover_items;
  KOSMOS_DEVICE i32 operator()() const {
    if (mover_head && ld_acquire_dev(mover_head) < u64(n_mover_items)) return -1;
    const u64 v = atomic_add_relaxed_dev(head, 1ull);
    if (v >= u64(n)) return -1;
    return order ? order[v] : i32(v);
  }
};

// An AG+GEMM tile waits for the gather item that holds its last row.
struct GatherReady {
  // One wait per tile is enough only while every tile lies inside one gather item.
  static_assert(kTileRow % kTileM == 0, "a GEMM tile must not span two gather items (GatherReady waits on one)");
  static constexpr bool kTrivial = false;
  const u64* arrived;
  u64 epoch, m;
  i32 tiles_m_per_chunk, items_per_chunk;
  bool alone;  // world 1: the builders read x itself, nothing is gathered or flagged
  WaitCtx wait;
  KOSMOS_DEVICE bool operator()(const TileCoord& t, i32 kb) const {
    if (kb != 0 || alone) return true;
    const i32 chunk = t.tm / tiles_m_per_chunk, tm = t.tm % tiles_m_per_chunk;
    u64 last = u64(tm + 1) * kTileM - 1;
    if (last >= m) last = m - 1;
    return wait_flag_sys(wait, SITE_TILE_READY, &arrived[chunk * items_per_chunk + last / kTileRow], epoch);
  }
};

// TN+RS: the first tile of each CTA waits until every CTA has poisoned its part of the next
// staging buffer, so no partial lands before the poison that guards the next call. Alone
// (world 1) there is no staging: the builders write the output and wait for nothing.
struct PoisonedReady {
  static constexpr bool kTrivial = false;
  const u64* staged;
  u64 target;
  bool alone;
  WaitCtx wait;
  KOSMOS_DEVICE bool operator()(const TileCoord&, i32 kb) const {
    return kb != 0 || alone || wait_flag_dev(wait, SITE_GRID, staged, target);
  }
};

// `mine` (this rank's flags) comes from the host rather than peer_bases[rank] + flags_off: the
// first claim of every CTA would otherwise wait for that dependent load.
#define TP_COMMON_PARAMS                                                                                   \
  const KOSMOS_GRID_CONSTANT TensorMap tma, const KOSMOS_GRID_CONSTANT TensorMap tmb,                       \
      const KOSMOS_GRID_CONSTANT TensorMap tmc, Problem p,                                                 \
      const u64 *__restrict__ peer_bases, OpFlags *mine, int rank, int world, u64 epoch, u64 flags_off,    \
      i32 movers, i32 policy, const i32 *__restrict__ tile_order, i32 n_tiles, WaitCtx wait

// ---------------------------------------------------------------------------------------
// AG+GEMM (fused: tiles wait for their rows; bulk: the GEMM is independent of the gather).
template <int L, bool kBulk, class Epi>
KOSMOS_DEVICE void ag_gemm(const TensorMap& tma, const TensorMap& tmb, const Problem& p, const Epi& epi,
                           const u64* peer_bases, OpFlags* mine, int rank, int world, u64 epoch, u64 flags_off,
                           i32 movers, i32 policy,
                           const i32* tile_order, i32 n_tiles, const WaitCtx& wait, u64 shard_off, u8* gathered,
                           u64* arrived, const u8* x, u64 m, u64 row_bytes, i32 items_per_chunk, i32 tiles_m_per_chunk,
                           const i32* mover_order, i32 n_mover_items, u32 mover_threads) {
  extern __shared__ __align__(1024) u8 smem[];
  const Gathered g{peer_bases, shard_off, gathered, m, row_bytes, items_per_chunk};
  // Before any early exit: CTA 0 zeroes the next call's heads here.
  FusedHeads* heads = fused_heads(mine, epoch);
  // Peers must have finished pulling our shard from the last call before we overwrite it.
  if (!wait_peers_done(wait, mine, rank, world, epoch)) return;
  stage_shard(g, rank, world, epoch, mine, flags_off, arrived, x);

  const bool mover = i32(blockIdx.x) < movers;
  const TableQueue q{&heads->mover, mover_order, n_mover_items, 2};
  if (mover && !gather_items(g, rank, epoch, mine, flags_off, arrived, q, mover_threads, wait)) return;
  if (!mover || policy != kFixed) {
    builder_init(smem);
    const bool two_way = policy == kTwoWay;
    TableClaim claim{&heads->tile, tile_order, n_tiles, two_way ? &heads->mover : nullptr, n_mover_items};
    const GatherReady ready{arrived, epoch, m, tiles_m_per_chunk, items_per_chunk, world == 1, wait};
    __shared__ int s_more;
    for (;;) {
      // Two-way: the builder's pipeline stays initialised while the CTA gathers between calls.
      const bool built = kBulk ? run_builder<L>(DenseSchedule<>{p}, &tma, &tmb, smem, claim, AlwaysReady{}, epi)
                               : run_builder<L>(DenseSchedule<>{p}, &tma, &tmb, smem, claim, ready, epi);
      if (!built) return;
      if (!two_way) break;
      // The builder stopped because gather items were left or because the tile queue ran dry.
      if (!gather_items(g, rank, epoch, mine, flags_off, arrived, q, mover_threads, wait)) return;
      const int more = threadIdx.x == 0 ? int(ld_acquire_dev(&heads->tile) < u64(n_tiles)) : 0;
      if (!cta_broadcast(&s_more, more)) break;
    }
  }
  // Nothing to do on the way out: movers told each peer when its shard was pulled, and the next
  // call's heads were zeroed at the start (fused_heads).
}

#define TP_AG_KERNEL(NAME, LAYOUT, BULK)                                                                  \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_COMMON_PARAMS, EpiStoreBf16 epi, u64 shard_off, u8* __restrict__ gathered, u64* arrived,      \
           const u8* __restrict__ x, u64 m, u64 row_bytes, i32 items_per_chunk, i32 tiles_m_per_chunk,       \
           const i32* __restrict__ mover_order, i32 n_mover_items, u32 mover_threads) {                     \
    ag_gemm<LAYOUT, BULK>(tma, tmb, p, EpiStoreBf16Tma(epi, &tmc), peer_bases, mine, rank, world, epoch,       \
                          flags_off, movers, policy, tile_order, n_tiles, wait, shard_off, gathered, arrived, x, m, \
                          row_bytes, items_per_chunk, tiles_m_per_chunk, mover_order, n_mover_items,        \
                          mover_threads);                                                                   \
  }
TP_AG_KERNEL(kosmos_tp_ag_tn, LAYOUT_TN, false)
TP_AG_KERNEL(kosmos_tp_ag_nn, LAYOUT_NN, false)
TP_AG_KERNEL(kosmos_tp_bulk_ag_nn, LAYOUT_NN, true)

// ---------------------------------------------------------------------------------------
// GEMM+RS. Fused (TN+RS): builders write partial tiles band-major into this call's staging
// buffer; reducers pull this rank's chunk from every rank; builders that find the GEMM queue
// empty join the reducers (one-way), up to max_join of them. Bulk (RS || NT): the RS input is
// staged at the start, reducers become builders of the independent wgrad when they are done.
template <int L, bool kBulk, class T, class Epi>
KOSMOS_DEVICE void gemm_rs(const TensorMap& tma, const TensorMap& tmb, const Problem& p, const Epi& epi,
                           const u64* peer_bases, OpFlags* mine, int rank, int world, u64 epoch, u64 flags_off,
                           i32 movers, i32 policy,
                           const i32* tile_order, i32 n_tiles, const WaitCtx& wait, u64 staging_off, u64 buffer_bytes,
                           u64 m, u64 cols, const vec16* x, u16* out, const i32* reduce_order, i32 n_reduce_items,
                           u64 band_rows, u32 slice_log2, i32 max_join) {
  extern __shared__ __align__(1024) u8 smem[];
  __shared__ int s_ok;
  __shared__ i32 s_idx;
  const Staging st{peer_bases, staging_off, buffer_bytes, m, cols};
  FusedHeads* heads = fused_heads(mine, epoch);
  builder_init(smem);
  if (!wait_peers_done(wait, mine, rank, world, epoch)) return;
  if (world > 1) {
    poison_and_stage<T>(st, rank, epoch, kBulk ? x : nullptr);
  } else if (kBulk && static_cast<const void*>(out) != static_cast<const void*>(x)) {
    grid_copy(out, x, m * cols * sizeof(u16));  // alone, the reduce-scatter is a copy (none in place)
  }  // alone, TN+RS builders write the output directly (the host points the epilogue at it)
  __syncthreads();
  if (world > 1 && threadIdx.x == 0) atomic_add_acq_rel_dev(&mine->staged, 1);

  auto reduce_loop = [&]() -> bool {
    const TableQueue q{&heads->mover, reduce_order, n_reduce_items, 2};
    for (;;) {
      const i32 idx = cta_broadcast(&s_idx, threadIdx.x == 0 ? q.claim() : 0);
      if (idx < 0) return true;
      reduce_item<T>(st, rank, world, epoch, band_rows, slice_log2, q.at(idx)[0], q.at(idx)[1], out, wait);
      if (!cta_broadcast(&s_ok, threadIdx.x == 0 ? int(still_ok(wait, SITE_SENTINEL)) : 0)) return false;
    }
  };
  auto build = [&]() -> bool {
    TableClaim claim{&heads->tile, tile_order, n_tiles, nullptr, 0};
    if (kBulk) return run_builder<L>(DenseSchedule<>{p}, &tma, &tmb, smem, claim, AlwaysReady{}, epi);
    const PoisonedReady ready{&mine->staged, epoch * gridDim.x, world == 1, wait};
    return run_builder<L>(DenseSchedule<>{p}, &tma, &tmb, smem, claim, ready, epi);
  };

  const bool mover = i32(blockIdx.x) < movers;
  if (mover) {
    if (n_reduce_items > 0 && !reduce_loop()) return;
    if (kBulk && policy == kOneWay && !build()) return;
  } else {
    if (!build()) return;
    // One-way: a builder that finds the GEMM queue empty joins the reducers (up to max_join).
    // Alone there is nothing to reduce: skip the two queue round trips at the end of every CTA.
    if (policy == kOneWay && n_reduce_items > 0) {
      const i32 joined = cta_broadcast(&s_idx, threadIdx.x == 0 ? i32(atomic_add_relaxed_dev(&heads->join, 1)) : 0);
      if (joined < max_join && !reduce_loop()) return;
    }
  }
  if (world > 1) signal_done_at_exit(mine, peer_bases, flags_off, rank, world, epoch);
}

#define TP_RS_KERNEL(NAME, LAYOUT, BULK, T, EPI, MAKE_EPI)                                                \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_COMMON_PARAMS, EPI epi, u64 staging_off, u64 buffer_bytes, u64 m, u64 cols,                 \
           const vec16* __restrict__ x, u16* __restrict__ out, const i32* __restrict__ reduce_order,       \
           i32 n_reduce_items, u64 band_rows, u32 slice_log2, i32 max_join) {                              \
    gemm_rs<LAYOUT, BULK, T>(tma, tmb, p, MAKE_EPI, peer_bases, mine, rank, world, epoch, flags_off, movers, \
                             policy, tile_order, n_tiles, wait, staging_off, buffer_bytes, m, cols, x, out, \
                             reduce_order, n_reduce_items, band_rows, slice_log2, max_join);                \
  }
// bf16 outputs (partials or dW) leave through shared memory and TMA stores (tmc); fp32 from registers.
#define TP_EPI_TMA EpiStoreBf16Tma(epi, &tmc)
#define TP_EPI_AS_IS epi
TP_RS_KERNEL(kosmos_tp_tn_rs_bf16, LAYOUT_TN, false, u16, EpiStoreBf16, TP_EPI_TMA)
TP_RS_KERNEL(kosmos_tp_tn_rs_f32, LAYOUT_TN, false, float, EpiStoreF32, TP_EPI_AS_IS)
TP_RS_KERNEL(kosmos_tp_bulk_rs_nt_bf16, LAYOUT_NT, true, u16, EpiStoreBf16, TP_EPI_TMA)
TP_RS_KERNEL(kosmos_tp_bulk_rs_nt_f32, LAYOUT_NT, true, u16, EpiStoreF32, TP_EPI_AS_IS)
