// The MoE combine and fold: each owner pushes its experts' output rows back to the ranks whose
// tokens they are, into those ranks' combine buffers in their dispatch order; each rank then folds
// every token's k rows, weighted by its fp32 router weights, in fp32, with the shared experts'
// output added, rounded to bf16 once.
//
// Layout from the dispatch's counts of the same call (all_counts [P][E], identical on every rank):
// at owner o the output rows are expert-major over o's experts, source-major inside (the arena's
// order); run (g, s) is contiguous there and lands contiguous at source s, at rows
// [sum_{g' < g} counts[s][g'], ...): s's dispatch order. So every item is one plain copy.
//
// Protocol: owners push call e after their dispatch of call e, which waited for every rank's counts
// of call e, so every source has started call e and has folded call e-1: its combine buffer is
// free. Per destination s, the owner's last item releases ready[owner] = e in s's flags; the fold
// waits for every owner that sends s rows at all.
//
// own_in_place: the rows an owner sends itself are not copied (an item of such a run only waits
// for its rows, then counts); the fold reads them where they are, in y. The forward's combine
// also leaves its own runs' table in own_runs, through which the router's backward finds those
// rows in y (router_grads.h).
#pragma once
#include "../calls.h"
#include "../cta.h"
#include "../flags.h"
#include "../bulk_rows.h"
#include "../protocol.h"
#include "../wait.h"
#include "items.h"
#include "layout.h"

namespace kosmos {
namespace moe {

struct CombineParams {
  const u64* peer_bases;
  WaitCtx wait;
  u64* calls;  // [2] the plan's call count: this call's epoch (calls.h)
  u64 flags_off;
  u64 comb_off;            // heap offset of the combine buffer [max rows back][row_bytes] (every rank)
  u64 row_bytes;
  const i32* all_counts;   // [P][E] the dispatch's counts of this call
  const i64* dispatch_status;  // the dispatch's status: nonzero (an overflow: nothing moved) -> NaN out
  const u8* y;             // [rows][row_bytes] this owner's expert outputs, expert-major, source-major
  u64* run_done;           // [2][P] local: items finished per destination, call parity (reset per call)
  const i32* slot;         // [T * k] the row of pair t * k + j in this rank's dispatch order (-1: dropped)
  const float* weights;    // [T][k]
  const float* shared;     // [T][H] fp32 shared experts' output to add, or null
  u16* out;                // [T][H] bf16
  i32 rank, world, experts, e_loc, top_k, tokens, item_rows;
  i32 scope;               // the CallScope this call's epoch is in: 0; 1 in the MoE forward kernel
  i32 own_in_place;        // 1: rows this rank sends itself stay in y, the fold reads them there
  i32* own_runs;           // [3][e_loc] (layout.h own_runs) written by CTA 0, or null
};

// Shared memory: counts[P][E], then run_base[e_loc * P] (a run's first row in y), run_dest[e_loc * P]
// (its first row at its source), chunk_start[e_loc * P + 1], dest_chunks[P], own[3 e_loc] (own_runs).
KOSMOS_DEVICE u64 combine_smem_bytes(i32 world, i32 experts, i32 e_loc) {
  return u64(world * experts + 3 * e_loc * world + 1 + world + 3 * e_loc) * 4;
}

struct CombineTables {
  i32 *counts, *run_base, *run_dest, *chunk_start, *dest_chunks, *own;
};

// All threads: the layout of this call from the dispatch's counts [P][E] at `counts` (d.all_counts
// after a dispatch launch; the dispatch's heap slot inside the MoE forward kernel, which peers wrote
// during it: relaxed system-scope loads), into the dynamic shared memory.
KOSMOS_DEVICE CombineTables combine_tables(const CombineParams& d, const i32* counts) {
  extern __shared__ __align__(16) u8 combine_smem[];
  const i32 P = d.world, E = d.experts, L = d.e_loc, me = d.rank, R = L * P;
  CombineTables m;
  m.counts = reinterpret_cast<i32*>(combine_smem);
  m.run_base = m.counts + P * E;
  m.run_dest = m.run_base + R;
  m.chunk_start = m.run_dest + R;
  m.dest_chunks = m.chunk_start + R + 1;
  m.own = m.dest_chunks + P;
  for (i32 v = threadIdx.x; v < P * E; v += blockDim.x)
    m.counts[v] = i32(ld_relaxed_sys_u32(reinterpret_cast<const u32*>(counts + v)));
  __syncthreads();
  own_runs(m.counts, P, E, L, me, m.own, threadIdx.x, blockDim.x);
  // Run v = l * P + s: local expert l (global g), source s.
  for (i32 v = threadIdx.x; v < R; v += blockDim.x) {
    const i32 g = me * L + v / P, s = v % P;
    m.run_base[v] = arena_row(m.counts, P, E, L, g, s);  // y is in the arena's order (layout.h)
    m.run_dest[v] = source_row(m.counts, E, g, s);
  }
  const auto chunks = [&](i32 v) { return (m.counts[(v % P) * E + me * L + v / P] + d.item_rows - 1) / d.item_rows; };
  for (i32 v = threadIdx.x; v < R; v += blockDim.x) m.chunk_start[v + 1] = chunks(v);
  for (i32 s = threadIdx.x; s < P; s += blockDim.x) {  // destination s's runs: v = l * P + s
    i32 c = 0;
    for (i32 v = s; v < R; v += P) c += chunks(v);
    m.dest_chunks[s] = c;
  }
  if (threadIdx.x == 0) m.chunk_start[0] = 0;
  __syncthreads();
  cta_inclusive_scan(m.chunk_start + 1, R);
  if (d.own_runs && blockIdx.x == 0)
    for (i32 v = threadIdx.x; v < 3 * L; v += blockDim.x) d.own_runs[v] = m.own[v];
  return m;
}

// The push: items (a chunk of a run) from this call's queue until it is dry. ready(l, row, rows):
// the CTA waits until y's rows [row, row + rows) (of local expert l) are final (false: a wait gave
// up; stop). smem_bytes: the kernel's dynamic shared memory; what the tables leave of it stages
// the rows (bulk_rows.h; 0: register copies).
template <int Unroll, class Ready>
KOSMOS_DEVICE bool combine_push(const CombineParams& d, const CombineTables& m, const Ready& ready, u32 smem_bytes = 0) {
  extern __shared__ __align__(16) u8 combine_smem[];
  const i32 P = d.world, E = d.experts, L = d.e_loc, me = d.rank, R = L * P;
  const Stage stage = stage_after(combine_smem, combine_smem_bytes(P, E, L), smem_bytes);
  FusedHeads* heads = fused_heads(flags_of(d.peer_bases, me, d.flags_off), call_epoch(d.scope));
  const i32 n_items = m.chunk_start[R];
  for (;;) {
    const i64 item = claim_item(heads);
    if (item >= n_items) return true;
    const i32 v = run_of(m.chunk_start, R, item), s = v % P, n = m.counts[s * E + me * L + v / P];
    const i32 first = (i32(item) - m.chunk_start[v]) * d.item_rows, rows = min(d.item_rows, n - first);
    if (!ready(v / P, m.run_base[v] + first, rows)) return false;
    if (s != me || !d.own_in_place) {  // (own_in_place: the fold reads this rank's own rows in y)
      u8* dst = reinterpret_cast<u8*>(d.peer_bases[s] + d.comb_off) + u64(m.run_dest[v] + first) * d.row_bytes;
      const u8* src = d.y + u64(m.run_base[v] + first) * d.row_bytes;
      bulk_copy_rows<Unroll>(stage.at, stage.bytes, dst, [&](u32 r) { return src + u64(r) * d.row_bytes; },
                             u32(rows), u32(d.row_bytes));
    }
    item_done(&d.run_done[i64(call_epoch(d.scope) & 1) * P + s], u64(m.dest_chunks[s]),
              &flags_of(d.peer_bases, s, d.flags_off)->ready[me], call_epoch(d.scope));
  }
}

// The fold: wait for every owner that sends this rank rows, then y[t] = sum_j w[t, j] row(t, j)
// (+ shared[t]) in fp32, rounded once. False: a wait gave up.
// V: 16-byte vectors per lane in flight. The fused kernels (one CTA per SM, the builder's
// registers) take 4; the standalone combine 1 (its __launch_bounds__ holds it to 56 registers, 3
// CTAs of 384 threads an SM; 2 needs 64, 4 needs 72: ptxas, sm_90a, session 13).
template <i32 V>
KOSMOS_DEVICE bool combine_fold(const CombineParams& d, const CombineTables& m) {
  __shared__ int s_ok;
  const i32 E = d.experts, L = d.e_loc, me = d.rank;
  OpFlags* mine = flags_of(d.peer_bases, me, d.flags_off);
  int ok = 1;
  if (threadIdx.x == 0)
    for (int o = 0; o < d.world && ok; ++o) {
      i32 rows = 0;
      for (i32 l = 0; l < L; ++l) rows += m.counts[me * E + o * L + l];
      if (rows > 0) ok = wait_flag_sys(d.wait, SITE_PEER_ARRIVED, &mine->ready[o], call_epoch(d.scope));
    }
  if (!cta_broadcast(&s_ok, ok)) return false;
  const u8* comb = reinterpret_cast<const u8*>(d.peer_bases[me] + d.comb_off);
  // row r of this rank's dispatch order: in the combine buffer, or (own_in_place, held by one of
  // this rank's experts) in y
  const auto row_at = [&](i32 r) {
    const i32 own = d.own_in_place ? own_output_row(m.own, L, r) : -1;
    return own >= 0 ? d.y + u64(own) * d.row_bytes : comb + u64(r) * d.row_bytes;
  };
  // Work items are (token, pass): a warp folds kWarpSize * V vectors of one token's row, each lane
  // V of them with their loads issued together, and the next slot's load in flight while a row's
  // are (one 16-byte load per thread in flight, each behind its slot's, left the fold
  // latency-bound: 175 us of the fused forward at Qwen3-30B 2048, notes/moe.md session 13). No
  // division per vector. Per element the sum runs as before: j in order, then the shared
  // experts' output.
  const i32 vecs = i32(d.row_bytes / 16), lane = i32(threadIdx.x % kWarpSize);  // 8 bf16 per 16-byte vector
  const i32 per_pass = kWarpSize * V, passes = (vecs + per_pass - 1) / per_pass, k = d.top_k;
  const i64 warps = blockDim.x / kWarpSize, items = i64(d.tokens) * passes, stride = i64(gridDim.x) * warps;
  for (i64 item = i64(blockIdx.x) * warps + threadIdx.x / kWarpSize; item < items; item += stride) {
    const i64 t = item / passes;
    const i32 c0 = i32(item % passes) * per_pass + lane;
    float acc[V][8];
#pragma unroll
    for (i32 u = 0; u < V; ++u)
      for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
    i32 row = d.slot[t * k];
    const u8* src = row >= 0 ? row_at(row) : nullptr;
    for (i32 j = 0; j < k; ++j) {
      const i32 next = j + 1 < k ? d.slot[t * k + j + 1] : -1;
      if (row >= 0) {  // < 0: dropped past its expert's capacity (MoEConfig.capacity_factor)
        const float wt = d.weights[t * k + j];
        vec16 v[V];
#pragma unroll
        for (i32 u = 0; u < V; ++u)
          if (c0 + kWarpSize * u < vecs) v[u] = ld16_volatile(src + u64(c0 + kWarpSize * u) * 16);
        if (next >= 0) src = row_at(next);  // its table lookups while this row's loads are in flight
#pragma unroll
        for (i32 u = 0; u < V; ++u)
          if (c0 + kWarpSize * u < vecs) {
            float r[8];
            bf16x8_to_f32(v[u], r);
            for (int e = 0; e < 8; ++e) acc[u][e] += wt * r[e];
          }
      } else if (next >= 0) {
        src = row_at(next);
      }
      row = next;
    }
    if (d.shared) {  // fp32 [T][H], two 16-byte loads a vector, all issued before any store
      vec16 sh[V][2];
#pragma unroll
      for (i32 u = 0; u < V; ++u)
        if (c0 + kWarpSize * u < vecs) {
          const u8* p = reinterpret_cast<const u8*>(d.shared + t * (d.row_bytes / 2) + i64(c0 + kWarpSize * u) * 8);
          sh[u][0] = ld16(p);
          sh[u][1] = ld16(p + 16);
        }
#pragma unroll
      for (i32 u = 0; u < V; ++u)
        if (c0 + kWarpSize * u < vecs) {
          const u32 bits[8] = {sh[u][0].x, sh[u][0].y, sh[u][0].z, sh[u][0].w,
                               sh[u][1].x, sh[u][1].y, sh[u][1].z, sh[u][1].w};
          for (int e = 0; e < 8; ++e) acc[u][e] += __uint_as_float(bits[e]);
        }
    }
#pragma unroll
    for (i32 u = 0; u < V; ++u)
      if (c0 + kWarpSize * u < vecs) st16(d.out + t * (d.row_bytes / 2) + i64(c0 + kWarpSize * u) * 8, f32_to_bf16x8(acc[u]));
  }
  return true;
}

// All threads, first (whatever follows): the next call's queue heads and destination counters
// zeroed (CTA 0).
KOSMOS_DEVICE void combine_prepare(const CombineParams& d) {
  fused_heads(flags_of(d.peer_bases, d.rank, d.flags_off), call_epoch(d.scope));  // CTA 0 zeroes the next call's heads
  if (blockIdx.x == 0)
    for (i32 s = threadIdx.x; s < d.world; s += blockDim.x) d.run_done[i64((call_epoch(d.scope) + 1) & 1) * d.world + s] = 0;
}

// All threads, instead of the push and the fold after a dispatch that moved nothing (the same on
// every rank, so nothing waits): the output NaN.
KOSMOS_DEVICE void combine_nan(const CombineParams& d) {
  const i64 n = i64(d.tokens) * i64(d.row_bytes / 2);
  for (i64 v = i64(blockIdx.x) * blockDim.x + threadIdx.x; v < n; v += i64(gridDim.x) * blockDim.x) d.out[v] = 0x7FC0;
}

// After a dispatch launch: combine_prepare, then true (and the output NaN) if it moved nothing.
KOSMOS_DEVICE bool combine_skipped(const CombineParams& d) {
  combine_prepare(d);
  if (*d.dispatch_status == 0) return false;
  combine_nan(d);
  return true;
}

// The standalone combine: y is final before the launch.
KOSMOS_DEVICE void combine(const CombineParams& d) {
  if (combine_skipped(d)) return;
  const CombineTables m = combine_tables(d, d.all_counts);
  combine_push<kMoverUnroll>(d, m, [](i32, i32, i32) { return true; });
  combine_fold<1>(d, m);
}

}  // namespace moe
}  // namespace kosmos
