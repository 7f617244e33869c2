// The kernel parameters of the TP+SP fused kernels (hipsrc/tp.hip): one struct per family, passed
// by value after the three TMA maps. kosmos/tp/params.py mirrors each as a NumPy dtype, and
// tests/test_compile.py compiles static_asserts of every field's offset and size against it
// (kosmos/runtime/mirror.py), so host and device cannot drift apart silently.
#pragma once
#include "flags.h"
#include "gemm/tile.h"
#include "wait.h"

namespace kosmos {
namespace tp {

// What every fused kernel takes: its GEMM, the peers, its call epoch and its crew.
struct TpCommon {
  gemm::Problem p;
  WaitCtx wait;
  const u64* peer_bases;  // every rank's heap base (device table)
  OpFlags* mine;          // this rank's flags: from the host, so a first claim need not wait on a load
  const i32* tile_order;  // the builders' queue order (tile_of() indices), or null: the builder's raster
  u64 epoch;              // this call's epoch; the only field that changes from call to call
  u64 flags_off;          // the flags' offset in every rank's heap
  i32 rank, world;
  i32 movers;             // CTAs [0, movers) start as movers
  i32 policy;             // kOneWay, kFixed or kTwoWay (tp.hip)
  i32 n_tiles;
  i32 pad_;
};

// AG+TN, AG+NN, bulk AG || NN.
struct AgParams {
  TpCommon c;
  gemm::EpiStoreBf16 epi;
  u64 shard_off;          // the staged shard's offset in every rank's heap
  u8* gathered;           // this rank's gathered array [P*m rows]
  u64* arrived;           // per-(chunk, item) arrival counters
  const u8* x;            // this rank's shard
  u64 m, row_bytes;
  const i32* mover_order; // (peer, item) pairs in the movers' order
  i32 items_per_chunk, tiles_m_per_chunk, n_mover_items;
  u32 mover_threads;      // threads of a mover CTA that copy (the warps-per-mover ablation)
  // MXFP8 gathers (mx_blocks = mx::kRowBlocks or kColBlocks; kNone: bf16): the shard is E4M3 codes
  // [m, row_bytes / 2] at shard_off plus its E8M0 scales at scales_off; movers copy codes into
  // `gathered` and scales into gathered_scales (the *_mx kernels' MXFP8-A builders read them), or,
  // with gathered_scales null, dequantize into the bf16 gathered array.
  u64 scales_off;
  const u8* x_scales;     // this rank's scales
  i32 mx_blocks, pad_;
  u8* gathered_scales;
};

// AG+NN(+NT): the dgrad's gather and GEMM (a: the row-wise copy of dY, NN) and the wgrad's (the
// column-wise copy, gathered the same way into gathered2; p2: NT over it and X; epi2: dW, bf16;
// sk2: the wgrad's stream-K split in the *_sk kernels, n_tiles2 then its units).
struct AgNtParams {
  AgParams a;
  gemm::Problem p2;
  gemm::EpiStoreBf16 epi2;
  u64 shard_off2, scales_off2;
  u8* gathered2;
  u64* arrived2;
  const u8* x2;
  const u8* x_scales2;
  i32 mx_blocks2, n_tiles2;
  gemm::StreamK sk2;
};

// TN+RS and bulk RS || NT; Epi is the builders' epilogue record (bf16 or fp32 store).
template <class Epi>
struct RsParams {
  TpCommon c;
  Epi epi;
  u64 staging_off, buffer_bytes;  // the two staging buffers in every rank's heap
  u64 m, cols;
  const vec16* x;                 // bulk: the reduce-scatter's input (staged at the start)
  u16* out;                       // the reduced rows of this rank
  const i32* reduce_order;        // (band, slice) pairs in the reducers' order
  u64 band_rows;
  i32 n_reduce_items;
  u32 slice_log2;
  i32 max_join;                   // builders that may join the reducers (one-way)
  i32 pad_;
  gemm::StreamK sk;               // the *_sk kernels (bulk RS || NT on Hopper): the wgrad's K-range split
};

}  // namespace tp
}  // namespace kosmos
