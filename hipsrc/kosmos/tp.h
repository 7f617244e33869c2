// The pieces the TP+SP fused kernels (hipsrc/tp.hip) are made of: table-driven queues, the
// all-gather mover loop with per-(chunk, item) arrival counters, and the one-shot pull reducer.
#pragma once
#include "flags.h"
#include "mover.h"
#include "mx/dequant.h"
#include "protocol.h"
#include "sentinel.h"
#include "wait.h"

namespace kosmos {
namespace tp {

constexpr int kTileRow = 256;  // gathered rows per AG item (the readiness grain)

// A queue: a head counter plus an order table. Claimed by one thread; -1 when empty.
struct TableQueue {
  u64* head;
  const i32* order;  // [n] entries of `width` ints
  i32 n, width;
  KOSMOS_DEVICE i32 claim() const {
    const u64 v = atomic_add_relaxed_dev(head, 1ull);
    return v < u64(n) ? i32(v) : -1;
  }
  KOSMOS_DEVICE const i32* at(i32 i) const { return order + i64(i) * width; }
};

// Where a gathered operand lives: every rank stages its shard (m rows of row_bytes) in its heap,
// where peers pull it from, and gathers all P shards into `out`, a plain device array of P*m
// rows that is the GEMM's A operand and, when the caller keeps it, the gathered result.
// MXFP8 (blocks != kNone): the staged shard is E4M3 codes (a byte per element: rows of
// row_bytes / 2) with its E8M0 scales at scales_off. With out_scales set the gathered array stays
// MXFP8 (the MXFP8-A builders read it): `out` holds codes [P*m, cols] and out_scales the scales
// [P*m, cols / 32] (row blocks) or [P*m / 32, cols] (column blocks), and movers copy bytes; without
// it `out` is bf16 and movers dequantize.
// A kernel may gather two operands (AG+NN(+NT): both MXFP8 copies of dY); each has its own
// arrival counters, the peers' done flags count the items of all of them.
struct Gathered {
  const u64* peer_bases;
  u64 shard_off;  // offset of the staged shard [m rows] in every rank's heap
  u8* out;        // this rank's gathered array [P*m rows of row_bytes]
  u64 m, row_bytes;
  i32 items_per_chunk;
  u64 scales_off;
  int blocks;     // mx::Blocks
  u64* arrived;   // per-(chunk, item) arrival counters
  const u8* x;    // this rank's shard (codes, for MXFP8)
  const u8* x_scales;
  u8* out_scales;  // MXFP8 kept: the gathered scales (null: dequantize into bf16 `out`)
  KOSMOS_DEVICE const u8* shard(int peer, u64 row) const {
    return reinterpret_cast<const u8*>(peer_bases[peer] + shard_off) + row * row_bytes;
  }
  KOSMOS_DEVICE const u8* scales(int peer) const { return reinterpret_cast<const u8*>(peer_bases[peer] + scales_off); }
  KOSMOS_DEVICE u8* rows(int chunk, u64 row) const { return out + (u64(chunk) * m + row) * row_bytes; }
  KOSMOS_DEVICE u32 cols() const { return u32(row_bytes / 2); }
  // MXFP8 kept: rows [row0, row0 + rows) of chunk `chunk` are codes at (chunk m + row0) cols and
  // scales at a 32nd of that in either block layout (row0 and rows are multiples of 32: whole
  // column blocks, every offset and size a multiple of 16 bytes).
  KOSMOS_DEVICE u8* codes(int chunk, u64 row) const { return out + (u64(chunk) * m + row) * cols(); }
  KOSMOS_DEVICE u8* kept_scales(int chunk, u64 row) const { return out_scales + (u64(chunk) * m + row) * cols() / 32; }
  // Rows [row0, row0 + rows) of peer's shard into its chunk of out (`threads` of the CTA).
  KOSMOS_DEVICE void pull(int peer, u64 row0, u64 rows, u32 threads) const {
    if (blocks == mx::kNone) {
      cta_copy(this->rows(peer, row0), shard(peer, row0), rows * row_bytes, threads);
    } else if (out_scales != nullptr) {
      cta_copy(codes(peer, row0), shard(peer, 0) + row0 * cols(), rows * cols(), threads);
      cta_copy(kept_scales(peer, row0), scales(peer) + row0 * cols() / 32, rows * cols() / 32, threads);
    } else {
      mx::cta_dequant_rows(reinterpret_cast<u16*>(this->rows(peer, row0)), shard(peer, 0), scales(peer), row0,
                           u32(rows), cols(), blocks, threads);
    }
  }
};

// Stage this rank's shards (of the n gathers) into its heap (for peers) and its chunks of the
// gathered arrays (all CTAs); the last CTA marks the local chunks' items arrived and tells every
// peer the shards can be pulled. Alone (world 1) nothing is staged or flagged: the builders read
// the operands themselves.
KOSMOS_DEVICE void stage_shards(const Gathered* gs, int n, int rank, int world, u64 epoch, OpFlags* mine,
                                u64 flags_off) {
  if (world == 1) return;
  for (int j = 0; j < n; ++j) {
    const Gathered& g = gs[j];
    u8* staged = reinterpret_cast<u8*>(g.peer_bases[rank] + g.shard_off);
    if (g.blocks == mx::kNone) {
      const u64 bytes = g.m * g.row_bytes;
      grid_copy(staged, g.x, bytes);
      grid_copy(g.rows(rank, 0), g.x, bytes);
    } else {  // codes and scales for the peers (a scale per 32 elements either way); ours kept or bf16
      const u64 codes = g.m * g.cols();
      grid_copy(staged, g.x, codes);
      grid_copy(reinterpret_cast<u8*>(g.peer_bases[rank] + g.scales_off), g.x_scales, codes / 32);
      if (g.out_scales != nullptr) {
        grid_copy(g.codes(rank, 0), g.x, codes);
        grid_copy(g.kept_scales(rank, 0), g.x_scales, codes / 32);
      } else {
        mx::grid_dequant_rows(reinterpret_cast<u16*>(g.rows(rank, 0)), g.x, g.x_scales, g.m, g.cols(), g.blocks);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && arrive_last(&mine->staged, epoch, gridDim.x)) {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < gs[j].items_per_chunk; ++i)
        st_release_sys(&gs[j].arrived[rank * gs[j].items_per_chunk + i], epoch);
    signal_peers(gs[0].peer_bases, flags_off, rank, world, epoch, /*ready=*/true);
  }
}

// The movers' loop: pull (peer, item[, gather]) entries in table order (a third column picks one
// of n gathers) into this rank's gathered arrays and release each item's arrival counter; a peer
// is told its shards are pulled once all n gathers' items of it are (the n gathers have the same
// rows, hence the same item count: AG+NN(+NT)'s two copies of dY). `threads` of the CTA copy
// (the warps-per-mover ablation).
KOSMOS_DEVICE bool gather_items(const Gathered* gs, int n, int rank, u64 epoch, OpFlags* mine, u64 flags_off,
                                const TableQueue& q, u32 threads, const WaitCtx& wait) {
  __shared__ i32 s_idx;
  __shared__ int s_ok;
  for (;;) {
    const i32 idx = cta_broadcast(&s_idx, threadIdx.x == 0 ? q.claim() : 0);
    if (idx < 0) return true;
    const int peer = q.at(idx)[0];
    const u64 item = u64(q.at(idx)[1]);
    const Gathered& g = gs[q.width > 2 ? q.at(idx)[2] : 0];
    const int ok = threadIdx.x == 0 ? wait_flag_sys(wait, SITE_PEER_READY, &mine->ready[peer], epoch) : 1;
    if (!cta_broadcast(&s_ok, ok)) return false;
    const u64 row0 = item * kTileRow;
    const u64 rows = row0 + kTileRow > g.m ? g.m - row0 : kTileRow;
    g.pull(peer, row0, rows, threads);
    __syncthreads();
    if (threadIdx.x == 0) {
      fence_acq_rel_sys();
      st_release_sys(&g.arrived[peer * g.items_per_chunk + item], epoch);
      if (atomic_add_acq_rel_dev(&mine->items[peer], 1) + 1 == epoch * u64(n * g.items_per_chunk))
        st_release_sys(&flags_of(g.peer_bases, peer, flags_off)->done[rank], epoch);
    }
  }
}

// ---- reduce-scatter pieces (one-shot pull, NaN-sentinel arrival; sentinel.h) ----
// Reduce item (band, column slice) of this rank's chunk: pull it from every rank's current
// staging buffer, waiting on the sentinel, sum in fp32 in rank order, round once to bf16.
// Each thread owns kReduceVecs vectors at a time, peers in the outer loop, so kReduceVecs loads
// are in flight whatever the world size, and each element still sums ranks 0, 1, ... in order.
constexpr int kReduceVecs = 4;

template <class T>
KOSMOS_DEVICE bool reduce_item(const Staging& s, int rank, int world, u64 epoch, u64 band_rows, u32 slice_log2,
                               i32 band, i32 slice, u16* out, const WaitCtx& wait) {
  typedef Sentinel<T> S;
  const u64 row0 = u64(band) * band_rows;
  const u32 rows = u32(row0 + band_rows > s.m ? s.m - row0 : band_rows);
  const u64 col0 = u64(slice) << slice_log2;
  const u32 vec_log2 = slice_log2 - (S::kLanes == 8 ? 3 : 2);  // 16-byte vectors per slice row, log2
  const u32 total = rows << vec_log2, stride = blockDim.x * kReduceVecs;
  const u64 cur = s.cur(epoch);
  bool ok = true;
  for (u32 v0 = threadIdx.x; ok && v0 < total; v0 += stride) {
    u64 elem[kReduceVecs];
    float acc[kReduceVecs][S::kLanes];
#pragma unroll
    for (int u = 0; u < kReduceVecs; ++u) {
      // Power-of-two slices: shifts, not 64-bit divisions, in the innermost loop.
      const u32 v = v0 + u * blockDim.x;
      const u64 r = row0 + (v >> vec_log2), c = col0 + u64(v & ((1u << vec_log2) - 1)) * S::kLanes;
      elem[u] = (u64(rank) * s.m + r) * s.cols + c;
#pragma unroll
      for (int l = 0; l < S::kLanes; ++l) acc[u][l] = 0.f;
    }
    for (int p = 0; p < world && ok; ++p) {
      const u8* base = s.at(p, cur);
      vec16 d[kReduceVecs];
#pragma unroll
      for (int u = 0; u < kReduceVecs; ++u)
        if (v0 + u * blockDim.x < total) d[u] = ld16_volatile(base + elem[u] * sizeof(T));
#pragma unroll
      for (int u = 0; u < kReduceVecs; ++u) {
        if (v0 + u * blockDim.x >= total || !ok) continue;
        if (S::has(d[u])) {
          const u8* src = base + elem[u] * sizeof(T);
          ok = bounded_wait(wait, SITE_SENTINEL, [&] { d[u] = ld16_volatile(src); return !S::has(d[u]); });
        }
#pragma unroll
        for (int l = 0; l < S::kLanes; ++l) acc[u][l] += S::lane(d[u], l);
      }
    }
    if (!ok) break;
#pragma unroll
    for (int u = 0; u < kReduceVecs; ++u) {
      if (v0 + u * blockDim.x >= total) continue;
      const u64 local = elem[u] - u64(rank) * s.m * s.cols;  // the same element in this rank's output
#pragma unroll
      for (int l = 0; l < S::kLanes; l += 2)
        *reinterpret_cast<u32*>(out + local + l) = pack_bf16x2(acc[u][l], acc[u][l + 1]);
    }
  }
  return ok;
}

// GEMM+RS kernels: the last CTA out tells every peer that this rank has finished reading its
// staging buffers, so the peer may poison them for its next call.
KOSMOS_DEVICE void signal_done_at_exit(OpFlags* mine, const u64* peer_bases, u64 flags_off, int rank, int world,
                                       u64 epoch) {
  __syncthreads();
  if (threadIdx.x == 0 && arrive_last(&mine->exited, epoch, gridDim.x))
    signal_peers(peer_bases, flags_off, rank, world, epoch, /*ready=*/false);
}

}  // namespace tp
}  // namespace kosmos
