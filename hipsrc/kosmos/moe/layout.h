// Where MoE rows live, from every rank's per-expert counts of one call (counts[s * E + g]: rows rank
// s sends to global expert g; owner of g = g / e_loc). Pure arithmetic, so the dispatch and the
// combine agree by construction, and tests/test_moe_layout_host.py checks it on the CPU against an
// explicit model of every rank's rows.
//
// An owner's arena (and its expert outputs): its experts in order, each one's runs source 0, 1, ...,
// each run in its source's dispatch order. A source's dispatch order (and its combine buffer): by
// global expert, then token, then j.
#pragma once
#include "../platform.h"

namespace kosmos {
namespace moe {

// The first arena row, at g's owner, of source s's run of global expert g.
KOSMOS_DEVICE i32 arena_row(const i32* counts, i32 P, i32 E, i32 e_loc, i32 g, i32 s) {
  i32 row = 0;
  for (i32 h = (g / e_loc) * e_loc; h < g; ++h)
    for (i32 q = 0; q < P; ++q) row += counts[q * E + h];
  for (i32 q = 0; q < s; ++q) row += counts[q * E + g];
  return row;
}

// The rows owner o receives for its local expert l, from every source (i64: the dispatch's verdict
// sums counts no capacity has bounded yet).
KOSMOS_DEVICE i64 expert_rows(const i32* counts, i32 P, i32 E, i32 e_loc, i32 o, i32 l) {
  i64 rows = 0;
  for (i32 q = 0; q < P; ++q) rows += counts[q * E + o * e_loc + l];
  return rows;
}

// All threads of a CTA, on one call's counts (shared memory, written before a __syncthreads): the
// dispatch's verdict, the same on every rank -- -1 when a rank refused its input (it sends counts of
// -1), else the most rows an owner would receive past `capacity`, or 0. A warp an owner sums the
// rows it would receive (every count is one owner's, so the warps see them all); one thread walking
// the P x E counts took ~P x E shared loads' latency in every CTA (notes/moe.md session 41).
KOSMOS_DEVICE i64 counts_verdict(const i32* counts, i32 P, i32 E, i32 e_loc, u64 capacity) {
  __shared__ unsigned long long s_over;  // the most rows an owner past capacity would receive
  __shared__ int s_refused;
  if (threadIdx.x == 0) s_over = s_refused = 0;
  __syncthreads();
  const i32 lane = i32(threadIdx.x) % kWarpSize, warps = i32(blockDim.x) / kWarpSize;
  for (i32 o = i32(threadIdx.x) / kWarpSize; o < P; o += warps) {
    i64 rows = 0;
    bool refused = false;
    for (i32 i = lane; i < P * e_loc; i += kWarpSize) {  // (source i / e_loc, local expert i % e_loc)
      const i32 n = counts[(i / e_loc) * E + o * e_loc + i % e_loc];
      refused |= n < 0;
      rows += n;
    }
    rows = warp_sum_i64(rows);
    if (refused) s_refused = 1;
    if (lane == 0 && rows > i64(capacity)) atomicMax(&s_over, (unsigned long long)rows);  // (refused: moot)
  }
  __syncthreads();
  const i64 worst = s_refused ? -1 : i64(s_over);
  __syncthreads();  // the words are free for the next call
  return worst;
}

// The first row of expert g in source s's dispatch order (= its combine buffer).
KOSMOS_DEVICE i32 source_row(const i32* counts, i32 E, i32 g, i32 s) {
  i32 row = 0;
  for (i32 h = 0; h < g; ++h) row += counts[s * E + h];
  return row;
}

// Rank me's own runs (l, me), the rows its own experts get from itself: own[l] is run l's first row
// in me's dispatch order, own[e_loc + l] its first row in me's expert outputs (the arena's order),
// own[2 e_loc + l] its rows. Entry l for l in [first, e_loc) by step (threads of a CTA share it).
KOSMOS_DEVICE void own_runs(const i32* counts, i32 P, i32 E, i32 e_loc, i32 me, i32* own, i32 first = 0, i32 step = 1) {
  for (i32 l = first; l < e_loc; l += step) {
    own[l] = source_row(counts, E, me * e_loc + l, me);
    own[e_loc + l] = arena_row(counts, P, E, e_loc, me * e_loc + l, me);
    own[2 * e_loc + l] = counts[me * E + me * e_loc + l];
  }
}

// Where row `row` of rank me's dispatch order lies in me's own expert outputs when one of me's
// experts holds it (own: own_runs), else -1: the combine's fold and the router's backward read
// such rows there (combine.h own_in_place). Me's own runs are consecutive in its dispatch order
// (its experts are consecutive there): the last run starting at or before `row` is the only one
// that can hold it.
KOSMOS_DEVICE i32 own_output_row(const i32* own, i32 e_loc, i32 row) {
  if (e_loc < 1 || row < own[0]) return -1;
  i32 lo = 0, hi = e_loc - 1;
  while (lo < hi) {  // the last l with own[l] <= row
    const i32 mid = (lo + hi + 1) / 2;
    if (own[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  const i32 off = row - own[lo];
  return off < own[2 * e_loc + lo] ? own[e_loc + lo] + off : -1;
}

}  // namespace moe
}  // namespace kosmos
