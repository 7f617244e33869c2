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
#include "kosmos/tp_params.h"

using namespace kosmos;
using namespace kosmos::gemm;
using namespace kosmos::tp;

constexpr int kOneWay = 0, kFixed = 1, kTwoWay = 2;

// Builders claim tiles from the plan's order table (entries are tile_of() queue indices; no
// table = the builder's own raster). Two-way: with mover_head set, a claim returns -1 (stop
// building) while gather items remain. Where every CTA builds from its start in raster order and
// no unit waits for another (all_build: no movers and no stream-K, whose fix-up unit waits for the
// units queued before it; no table, no two-way: a rank alone), a CTA's first tile is its own
// (blockIdx.x) as in the plain GEMM's GridFirstClaim (schedule.h), the rest from the queue past
// the grid's first tiles.
struct TableClaim {
  u64* head;
  const i32* order;
  i32 n;
  const u64* mover_head;
  i32 n_mover_items;
  bool grid_first, first;
  KOSMOS_DEVICE TableClaim(u64* head_, const i32* order_, i32 n_, const u64* mover_head_, i32 n_mover_items_,
                           bool all_build)
      : head(head_), order(order_), n(n_), mover_head(mover_head_), n_mover_items(n_mover_items_),
        grid_first(all_build && order_ == nullptr && mover_head_ == nullptr), first(grid_first) {}
  KOSMOS_DEVICE i32 operator()() {
    if (first) {
      first = false;
      return i32(blockIdx.x) < n ? i32(blockIdx.x) : -1;
    }
    if (mover_head && ld_acquire_dev(mover_head) < u64(n_mover_items)) return -1;
    const u64 v = atomic_add_relaxed_dev(head, 1ull) + (grid_first ? gridDim.x : 0u);
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

// Every kernel takes the three TMA maps (A, B, the bf16 output) and its family's params record
// (kosmos/tp_params.h), all in the kernel's parameter space (no copy: grid constants).
#define TP_MAPS                                                                                         \
  const KOSMOS_GRID_CONSTANT TensorMap tma, const KOSMOS_GRID_CONSTANT TensorMap tmb,                     \
      const KOSMOS_GRID_CONSTANT TensorMap tmc

// A wgrad unit (NT: it reduces over every gathered row) waits for all of its gather's items. Every
// unit waits, whatever its first slab: a stream-K K-range starts past slab 0 (the builder calls the
// hook once a unit, with its first slab).
struct AllGatheredReady {
  static constexpr bool kTrivial = false;
  const u64* arrived;
  u64 epoch;
  i32 n_items;
  bool alone;
  WaitCtx wait;
  KOSMOS_DEVICE bool operator()(const TileCoord&, i32) const {
    if (alone) return true;
    for (i32 i = 0; i < n_items; ++i)
      if (!wait_flag_sys(wait, SITE_TILE_READY, &arrived[i], epoch)) return false;
    return true;
  }
};

KOSMOS_DEVICE Gathered gathered_of(const TpCommon& c, const AgParams& a) {
  return Gathered{c.peer_bases, a.shard_off, a.gathered, a.m, a.row_bytes, a.items_per_chunk,
                  a.scales_off, a.mx_blocks, a.arrived, a.x, a.x_scales, a.gathered_scales};
}

// ---------------------------------------------------------------------------------------
// AG+GEMM (fused: tiles wait for their rows; bulk: the GEMM is independent of the gather).
template <int L, bool kBulk, class Tile, class Epi>
KOSMOS_DEVICE void ag_gemm(const TensorMap& tma, const TensorMap& tmb, const AgParams& a, const Epi& epi) {
  const TpCommon& c = a.c;
  const WaitCtx& wait = c.wait;
  const int rank = c.rank, world = c.world;
  const u64 epoch = c.epoch;
  extern __shared__ __align__(1024) u8 smem[];
  const Gathered g = gathered_of(c, a);
  // Before any early exit: CTA 0 zeroes the next call's heads here.
  FusedHeads* heads = fused_heads(c.mine, epoch);
  // Peers must have finished pulling our shard from the last call before we overwrite it.
  if (!wait_peers_done(wait, c.mine, rank, world, epoch)) return;
  stage_shards(&g, 1, rank, world, epoch, c.mine, c.flags_off);

  const bool mover = i32(blockIdx.x) < c.movers;
  const TableQueue q{&heads->mover, a.mover_order, a.n_mover_items, 2};
  auto gather = [&]() {
    return gather_items(&g, 1, rank, epoch, c.mine, c.flags_off, q, a.mover_threads, wait);
  };
  if (mover && !gather()) return;
  if (!mover || c.policy != kFixed) {
    builder_init(smem);
    // (The MXFP8-A tiles run one-way: the two-way loop's state, live across the builder, costs the
    // consumers the registers their fragments need; ptxas then serializes the wgmma.)
    const bool two_way = c.policy == kTwoWay && !Tile::kMxA;
    TableClaim claim{&heads->tile, c.tile_order, c.n_tiles, two_way ? &heads->mover : nullptr, a.n_mover_items,
                     c.movers == 0};
    const GatherReady ready{a.arrived, epoch, a.m, a.tiles_m_per_chunk, a.items_per_chunk, world == 1, wait};
    const DenseSchedule<Tile> sched{c.p};
    __shared__ int s_more;
    for (;;) {
      // Two-way: the builder's pipeline stays initialised while the CTA gathers between calls.
      const bool built = kBulk ? run_builder<L>(sched, &tma, &tmb, smem, claim, AlwaysReady{}, epi)
                               : run_builder<L>(sched, &tma, &tmb, smem, claim, ready, epi);
      if (!built) return;
      if (!two_way) break;
      // The builder stopped because gather items were left or because the tile queue ran dry.
      if (!gather()) return;
      const int more = threadIdx.x == 0 ? int(ld_acquire_dev(&heads->tile) < u64(c.n_tiles)) : 0;
      if (!cta_broadcast(&s_more, more)) break;
    }
  }
  // Nothing to do on the way out: movers told each peer when its shard was pulled, and the next
  // call's heads were zeroed at the start (fused_heads).
}

// Every kernel comes in the default 128x256 tile and, on Hopper, 128x192 and 128x128 ones
// (NAME_n192, NAME_n128) that the host picks as the plain GEMM does (kosmos/tp/ops.py _set_gemm); the
// 128-wide one ping-pong, as the plain GEMM's (builder_wgmma.h consume_pingpong).
#if KOSMOS_GEMM_WGMMA
#define TP_KERNELS(KERNEL, NAME, ...)                                                                   \
  KERNEL(NAME, DefaultTile, __VA_ARGS__) KERNEL(NAME##_n192, MidTile, __VA_ARGS__)                     \
  KERNEL(NAME##_n128, PingPongTile, __VA_ARGS__)
#else
#define TP_KERNELS(KERNEL, NAME, ...) KERNEL(NAME, DefaultTile, __VA_ARGS__)
#endif

#define TP_AG_KERNEL(NAME, TILE, LAYOUT, BULK)                                                            \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_MAPS, const KOSMOS_GRID_CONSTANT AgParams a) {                                              \
    ag_gemm<LAYOUT, BULK, TILE>(tma, tmb, a, EpiStoreBf16Tma(a.epi, &tmc));                               \
  }
TP_KERNELS(TP_AG_KERNEL, kosmos_tp_ag_tn, LAYOUT_TN, false)
TP_KERNELS(TP_AG_KERNEL, kosmos_tp_ag_nn, LAYOUT_NN, false)
TP_KERNELS(TP_AG_KERNEL, kosmos_tp_bulk_ag_nn, LAYOUT_NN, true)
// MXFP8 A (Hopper): the gathered operand kept in MXFP8 (AgParams::gathered_scales) and the
// builders on the MXFP8-A tiles (config.h MxA: codes dequantized into wgmma's registers), B
// k-permuted by the host, as kosmos.matmul's register path (NAME_mx, NAME_mx_n192, NAME_mx_n128).
#if KOSMOS_GEMM_WGMMA
#define TP_MX_KERNELS(KERNEL, NAME, ...)                                                                \
  KERNEL(NAME##_mx, MxTile, __VA_ARGS__) KERNEL(NAME##_mx_n192, MxMidTile, __VA_ARGS__)                 \
  KERNEL(NAME##_mx_n128, MxNarrowTile, __VA_ARGS__)
TP_MX_KERNELS(TP_AG_KERNEL, kosmos_tp_ag_tn, LAYOUT_TN, false)
TP_MX_KERNELS(TP_AG_KERNEL, kosmos_tp_ag_nn, LAYOUT_NN, false)
TP_MX_KERNELS(TP_AG_KERNEL, kosmos_tp_bulk_ag_nn, LAYOUT_NN, true)  // dY MXFP8 (its own, not gathered)
#endif

// ---------------------------------------------------------------------------------------
// AG+NN(+NT), the MXFP8 row-parallel backward in one launch: dX = allgather(dY) W (NN, over the
// row-wise copy of dY: a.c.p) and dW = allgather(dY)^T X (NT, over the column-wise copy: p2).
// Movers gather both copies (the table's third column picks the gather; the row-wise items come
// first, the dgrad needs them first); builders run every dgrad tile, each waiting for its rows,
// then the wgrad tiles, each waiting for the whole column-wise gather (it reduces over all rows).
// DgradTile: the dgrad's (MxInBf16Ring: the row-wise copy kept MXFP8, AgParams::gathered_scales).
// kStreamK: the wgrad's last waves cut into K-ranges (P.sk2), as the plain GEMM's: its few tiles
// reduce over every gathered row, so whole tiles after the dgrad leave most CTAs idle (8B-OProj:
// 64 tiles of 128+ slabs on 132 CTAs). No mover reads dW, so a tile may have several completion points.
template <class Tile, class DgradTile = Tile, bool kStreamK = false>
KOSMOS_DEVICE void ag_nn_nt(const TensorMap& tma, const TensorMap& tmb, const TensorMap& tmc, const AgNtParams& P,
                            const TensorMap& tma2, const TensorMap& tmb2, const TensorMap& tmc2) {
  const AgParams& a = P.a;
  const TpCommon& c = a.c;
  const WaitCtx& wait = c.wait;
  const int rank = c.rank, world = c.world;
  const u64 epoch = c.epoch;
  extern __shared__ __align__(1024) u8 smem[];
  const Gathered gs[2] = {gathered_of(c, a),
                          Gathered{c.peer_bases, P.shard_off2, P.gathered2, a.m, a.row_bytes, a.items_per_chunk,
                                   P.scales_off2, P.mx_blocks2, P.arrived2, P.x2, P.x_scales2, nullptr}};
  FusedHeads* heads = fused_heads(c.mine, epoch);  // tile: the dgrad's queue, join: the wgrad's
  if (!wait_peers_done(wait, c.mine, rank, world, epoch)) return;
  stage_shards(gs, 2, rank, world, epoch, c.mine, c.flags_off);
  const bool mover = i32(blockIdx.x) < c.movers;
  const TableQueue q{&heads->mover, a.mover_order, a.n_mover_items, 3};
  if (mover && !gather_items(gs, 2, rank, epoch, c.mine, c.flags_off, q, a.mover_threads, wait)) return;
  if (mover && c.policy == kFixed) return;
  builder_init(smem);
  TableClaim dgrad_claim{&heads->tile, c.tile_order, c.n_tiles, nullptr, 0, c.movers == 0};
  const GatherReady dgrad_ready{a.arrived, epoch, a.m, a.tiles_m_per_chunk, a.items_per_chunk, world == 1, wait};
  const DenseSchedule<DgradTile> dgrad{c.p};
  const EpiStoreBf16Tma dgrad_epi(a.epi, &tmc);
  // (stream-K: no own first unit, queue order keeps the fix-up waits cycle-free: gemm_rs below)
  TableClaim wgrad_claim{&heads->join, nullptr, P.n_tiles2, nullptr, 0, c.movers == 0 && !kStreamK};
  const AllGatheredReady wgrad_ready{P.arrived2, epoch, world * a.items_per_chunk, world == 1, wait};
  const EpiStoreBf16Tma wgrad_epi(P.epi2, &tmc2);
  // One builder call for both GEMMs (the wgrad is skipped when a dgrad wait aborted): a register
  // trade in a second builder call hung the MoE forward (notes/moe.md, session 11).
  auto build = [&](const auto& wgrad) {
    run_builder_jobs(smem, builder_job<LAYOUT_NN>(dgrad, &tma, &tmb, dgrad_claim, dgrad_ready, dgrad_epi),
                     builder_job<LAYOUT_NT>(wgrad, &tma2, &tmb2, wgrad_claim, wgrad_ready, wgrad_epi));
  };
  if constexpr (kStreamK) build(StreamKSchedule<Tile>{P.p2, P.sk2, wait});
  else build(DenseSchedule<Tile>{P.p2});
}

// (The six maps first: the launch packs arguments at their NumPy alignment, and every map must
// sit on a 64-byte boundary.)
#define TP_AG_NN_NT_KERNEL_WITH(NAME, TILE, DGRAD_TILE, STREAM_K)                                       \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_MAPS, const KOSMOS_GRID_CONSTANT TensorMap tma2, const KOSMOS_GRID_CONSTANT TensorMap tmb2, \
           const KOSMOS_GRID_CONSTANT TensorMap tmc2, const KOSMOS_GRID_CONSTANT AgNtParams p) {          \
    ag_nn_nt<TILE, DGRAD_TILE, STREAM_K>(tma, tmb, tmc, p, tma2, tmb2, tmc2);                             \
  }
#define TP_AG_NN_NT_KERNEL(NAME, TILE, ...) TP_AG_NN_NT_KERNEL_WITH(NAME, TILE, TILE, false)
TP_KERNELS(TP_AG_NN_NT_KERNEL, kosmos_tp_ag_nn_nt)
#if KOSMOS_GEMM_WGMMA  // the dgrad on the MXFP8-A tiles in the bf16 tiles' ring (NAME_mx, _mx_n192, _mx_n128)
TP_AG_NN_NT_KERNEL_WITH(kosmos_tp_ag_nn_nt_mx, DefaultTile, MxInBf16Ring<256>, false)
TP_AG_NN_NT_KERNEL_WITH(kosmos_tp_ag_nn_nt_mx_n192, MidTile, MxInBf16Ring<192>, false)
TP_AG_NN_NT_KERNEL_WITH(kosmos_tp_ag_nn_nt_mx_n128, PingPongTile, MxInBf16Ring<128>, false)
// the wgrad in stream-K (128 x 256 tiles only: kosmos/tp/ops.py AllGatherMatmulNNNT chooses it as kosmos.matmul does)
TP_AG_NN_NT_KERNEL_WITH(kosmos_tp_ag_nn_nt_sk, DefaultTile, DefaultTile, true)
TP_AG_NN_NT_KERNEL_WITH(kosmos_tp_ag_nn_nt_mx_sk, DefaultTile, MxInBf16Ring<256>, true)
#endif

// ---------------------------------------------------------------------------------------
// GEMM+RS. Fused (TN+RS): builders write partial tiles band-major into this call's staging
// buffer; reducers pull this rank's chunk from every rank; builders that find the GEMM queue
// empty join the reducers (one-way), up to max_join of them. Bulk (RS || NT): the RS input is
// staged at the start, reducers become builders of the independent wgrad when they are done.
// kStreamK (bulk only: no mover reads the wgrad's tiles, so a tile may have several completion
// points): the wgrad's last waves cut into K-ranges (gemm::StreamKSchedule, r.sk), as the plain GEMM.
template <int L, bool kBulk, class T, class Tile, bool kStreamK, class P, class Epi>
KOSMOS_DEVICE void gemm_rs(const TensorMap& tma, const TensorMap& tmb, const P& r, const Epi& epi) {
  const TpCommon& c = r.c;
  const WaitCtx& wait = c.wait;
  const int rank = c.rank, world = c.world;
  const u64 epoch = c.epoch;
  extern __shared__ __align__(1024) u8 smem[];
  __shared__ int s_ok;
  __shared__ i32 s_idx;
  const Staging st{c.peer_bases, r.staging_off, r.buffer_bytes, r.m, r.cols};
  FusedHeads* heads = fused_heads(c.mine, epoch);
  builder_init(smem);
  if (!wait_peers_done(wait, c.mine, rank, world, epoch)) return;
  if (world > 1) {
    poison_and_stage<T>(st, rank, epoch, kBulk ? r.x : nullptr);
  } else if (kBulk && static_cast<const void*>(r.out) != static_cast<const void*>(r.x)) {
    grid_copy(r.out, r.x, r.m * r.cols * sizeof(u16));  // alone, the reduce-scatter is a copy (none in place)
  }  // alone, TN+RS builders write the output directly (the host points the epilogue at it)
  __syncthreads();
  if (world > 1 && threadIdx.x == 0) atomic_add_acq_rel_dev(&c.mine->staged, 1);

  auto reduce_loop = [&]() -> bool {
    const TableQueue q{&heads->mover, r.reduce_order, r.n_reduce_items, 2};
    for (;;) {
      const i32 idx = cta_broadcast(&s_idx, threadIdx.x == 0 ? q.claim() : 0);
      if (idx < 0) return true;
      reduce_item<T>(st, rank, world, epoch, r.band_rows, r.slice_log2, q.at(idx)[0], q.at(idx)[1], r.out, wait);
      if (!cta_broadcast(&s_ok, threadIdx.x == 0 ? int(still_ok(wait, SITE_SENTINEL)) : 0)) return false;
    }
  };
  auto build = [&]() -> bool {
    TableClaim claim{&heads->tile, c.tile_order, c.n_tiles, nullptr, 0, c.movers == 0 && !kStreamK};  // n_tiles: units
    if constexpr (kStreamK) {
      static_assert(kBulk, "stream-K only where no mover waits for a tile");
      const StreamKSchedule<Tile> sched{c.p, r.sk, wait};
      return run_builder<L>(sched, &tma, &tmb, smem, claim, AlwaysReady{}, epi);
    }
    const DenseSchedule<Tile> sched{c.p};
    if (kBulk) return run_builder<L>(sched, &tma, &tmb, smem, claim, AlwaysReady{}, epi);
    const PoisonedReady ready{&c.mine->staged, epoch * gridDim.x, world == 1, wait};
    return run_builder<L>(sched, &tma, &tmb, smem, claim, ready, epi);
  };

  const bool mover = i32(blockIdx.x) < c.movers;
  if (mover) {
    if (r.n_reduce_items > 0 && !reduce_loop()) return;
    if (kBulk && c.policy == kOneWay && !build()) return;
  } else {
    if (!build()) return;
    // One-way: a builder that finds the GEMM queue empty joins the reducers (up to max_join).
    // Alone there is nothing to reduce: skip the two queue round trips at the end of every CTA.
    if (c.policy == kOneWay && r.n_reduce_items > 0) {
      const i32 joined = cta_broadcast(&s_idx, threadIdx.x == 0 ? i32(atomic_add_relaxed_dev(&heads->join, 1)) : 0);
      if (joined < r.max_join && !reduce_loop()) return;
    }
  }
  if (world > 1) signal_done_at_exit(c.mine, c.peer_bases, c.flags_off, rank, world, epoch);
}

#define TP_RS_KERNEL(NAME, TILE, LAYOUT, BULK, T, EPI, MAKE_EPI)                                          \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_MAPS, const KOSMOS_GRID_CONSTANT RsParams<EPI> r) {                                         \
    gemm_rs<LAYOUT, BULK, T, TILE, false>(tma, tmb, r, MAKE_EPI);                                         \
  }
// bf16 outputs (partials or dW) leave through shared memory and TMA stores (tmc); fp32 from registers.
#define TP_EPI_TMA EpiStoreBf16Tma(r.epi, &tmc)
#define TP_EPI_AS_IS r.epi
TP_KERNELS(TP_RS_KERNEL, kosmos_tp_tn_rs_bf16, LAYOUT_TN, false, u16, EpiStoreBf16, TP_EPI_TMA)
TP_KERNELS(TP_RS_KERNEL, kosmos_tp_tn_rs_f32, LAYOUT_TN, false, float, EpiStoreF32, TP_EPI_AS_IS)
TP_KERNELS(TP_RS_KERNEL, kosmos_tp_bulk_rs_nt_bf16, LAYOUT_NT, true, u16, EpiStoreBf16, TP_EPI_TMA)
TP_KERNELS(TP_RS_KERNEL, kosmos_tp_bulk_rs_nt_f32, LAYOUT_NT, true, u16, EpiStoreF32, TP_EPI_AS_IS)
#if KOSMOS_GEMM_WGMMA  // stream-K (kosmos/tp/ops.py BulkReduceScatterMatmul chooses it as kosmos.matmul does)
#define TP_RS_SK_KERNEL(NAME, EPI, MAKE_EPI)                                                            \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                             \
      NAME(TP_MAPS, const KOSMOS_GRID_CONSTANT RsParams<EPI> r) {                                         \
    gemm_rs<LAYOUT_NT, true, u16, DefaultTile, true>(tma, tmb, r, MAKE_EPI);                              \
  }
TP_RS_SK_KERNEL(kosmos_tp_bulk_rs_nt_bf16_sk, EpiStoreBf16, TP_EPI_TMA)
TP_RS_SK_KERNEL(kosmos_tp_bulk_rs_nt_f32_sk, EpiStoreF32, TP_EPI_AS_IS)
#endif
