// The dispatch plan: the stable counting sort of (token, j) pairs by expert (expert-major, then
// token, then j), and the router's losses, as steps with no atomics (the same result on every run).
// hipsrc/moe_route.hip runs each step with one CTA per chunk of kChunk tokens, a lane per expert,
// token or pair of the chunk (tests/host/route_main.cpp runs the lanes one after another).
//
//   chunk_count     lane per expert: the chunk's pairs routed to it
//   token_norm      lane per token (losses only): its scores' normaliser, their sum, its logsumexp^2
//   chunk_prob_sum  lane per expert (losses only): its normalised scores summed over the chunk's
//                   tokens, in token order
//   scan_expert     one thread per expert: its rows before each chunk, its total, its mean score
//   rank_in_chunk   lane per pair: its rank among the chunk's earlier pairs of its expert; with the
//                   scanned offsets: order[row] = t * k + j, slot[t * k + j] = row
//
// The forward megakernel's routing (router.h) runs the same sort grid-wide: RouteParams, and its
// step 3 here (place_chunks: every CTA its run of chunks; tests/host/cta_main.cpp runs it on a
// host-emulated CTA).
#pragma once
#include "../cta.h"
#include "route.h"

namespace kosmos {
namespace moe {

KOSMOS_DEVICE i32 chunks_of(i32 tokens) { return (tokens + kChunk - 1) / kChunk; }

// The shared i32 words the megakernel's placement of a chunk holds (place_chunks below: start[],
// the running counts, a chunk's pairs), padded to 16 bytes; the keep rule's words follow them
// (capacity.h keep_words). Mirrored: kosmos/moe/route.py place_words (checked through
// tests/host/route_main.cpp).
KOSMOS_DEVICE constexpr i32 place_words(i32 experts) { return (2 * experts + 1 + kChunk * kMaxTopK + 3) / 4 * 4; }

// ex: the experts of the chunk's n pairs (experts[c * kChunk * k ...]).
KOSMOS_DEVICE i32 chunk_count(const i32* ex, i32 n, i32 e) {
  i32 count = 0;
  for (i32 i = 0; i < n; ++i) count += ex[i] == e;
  return count;
}

KOSMOS_DEVICE i32 rank_in_chunk(const i32* ex, i32 i) {
  i32 rank = 0;
  for (i32 q = 0; q < i; ++q) rank += ex[q] == ex[i];
  return rank;
}

struct TokenNorm {
  RowExp re;    // the softmax normaliser and the logsumexp's parts (row_exp)
  float total;  // the scores' sum: 1 up to rounding (softmax), the reference's normaliser (sigmoid)
  double lse2;  // logsumexp^2, for the z-loss
};

// `re`: row_exp of the row (once, for the scores and the logsumexp).
KOSMOS_DEVICE TokenNorm token_norm(const RouteRule& r, const float* row, const RowExp& re) {
  TokenNorm n;
  n.re = re;
  const Scorer score = make_scorer(r, row, n.re);
  n.total = 0.0f;
  for (i32 e = 0; e < r.experts; ++e) n.total += score(e);
  const double lse = double(n.re.max) + log(double(n.re.sum));
  n.lse2 = lse * lse;
  return n;
}

KOSMOS_DEVICE TokenNorm token_norm(const RouteRule& r, const float* row) { return token_norm(r, row, row_exp(row, r.experts)); }

// The chunk's n tokens' logits rows at rows, rows + ld, ...; norms[i]: token_norm of token i.
KOSMOS_DEVICE double chunk_prob_sum(const RouteRule& r, const float* rows, i64 ld, i32 n_tokens, const TokenNorm* norms,
                                    i32 e) {
  double p = 0.0;
  for (i32 i = 0; i < n_tokens; ++i) {
    const TokenNorm& n = norms[i];
    p += double(make_scorer(r, rows + i * ld, n.re)(e) / n.total);
  }
  return p;
}

// Expert e's normalised score averaged over the tokens, from the chunks' sums in chunk order (the
// order fixes the bits: the forward megakernel sums the same way).
KOSMOS_DEVICE float expert_mean_prob(i32 e, i32 E, i32 chunks, i32 tokens, const double* __restrict__ prob_sums) {
  double p = 0.0;
  for (i32 c = 0; c < chunks; ++c) p += prob_sums[i64(c) * E + e];
  return float(p / tokens);
}

// Expert e's offsets[c][e] = rows of e in chunks before c (start[e] is added by the caller once the
// totals are scanned); returns e's total. mean_prob[e] (when prob_sums is non-null): expert_mean_prob.
KOSMOS_DEVICE i32 scan_expert(i32 e, i32 E, i32 chunks, i32 tokens, const i32* counts, i32* offsets,
                              const double* prob_sums, float* mean_prob) {
  i32 run = 0;
  for (i32 c = 0; c < chunks; ++c) {
    offsets[i64(c) * E + e] = run;
    run += counts[i64(c) * E + e];
  }
  if (prob_sums) mean_prob[e] = expert_mean_prob(e, E, chunks, tokens, prob_sums);
  return run;
}

// The losses from the scanned totals (start[E + 1]) and mean scores: what reference.route returns.
struct RouterLosses {
  float aux, z;
};
KOSMOS_DEVICE RouterLosses router_losses(i32 E, i32 tokens, i32 top_k, const i32* start, const float* mean_prob,
                                         const double* lse_sq, i32 chunks, float aux_coef, float z_coef) {
  double aux = 0.0, z = 0.0;
  for (i32 e = 0; e < E; ++e)  // unfused: route() and the in-launch routing must agree bit for bit
    aux += mul_unfused(double(start[e + 1] - start[e]) / (double(tokens) * top_k), double(mean_prob[e]));
  for (i32 c = 0; c < chunks; ++c) z += lse_sq[c];
  return RouterLosses{float(aux_coef * E * aux), float(z_coef * (z / tokens))};
}

struct RouteParams {
  RouteRule rule;
  float* logits;        // [T][ld] fp32: the router GEMM's output (under split-K, the sum of its partials)
  i64 ld;
  i32* experts;         // [T][k] best first
  float* weights;       // [T][k]
  i32* order;           // [T * k] row -> t * k + j (under token dropping: the kept rows, -1 past them)
  i32* slot;            // [T * k] t * k + j -> row (or -1: dropped)
  i32* start;           // [E + 1]
  i32* all_order;       // [T * k] scratch under token dropping: every chosen pair's plan (step 3), or null
  u8* kept;             // [T * k] under token dropping: 1 kept, 0 dropped, or null
  i32* counts;          // [chunks][E] scratch: the chunks' pairs per expert
  double* prob_sums;    // [chunks][E] scratch, or null: no losses
  double* lse_sq;       // [chunks] scratch (with prob_sums)
  float* mean_prob;     // [E] (with prob_sums)
  float* losses;        // [2] aux, z (zeros without prob_sums)
  u64* grid;            // [2] the grid barrier's words (grid.h)
  i32 tokens;           // T; -1: the routing came with the call, none of this runs
  float aux_coef, z_coef;
  i32 capacity;         // token dropping: each expert's most pairs; -1: dropless
};

// Step 3, all threads of a CTA, after every CTA's step 2. Chunks [first, last) are this CTA's to
// place (contiguous, so one prefix serves them all): the experts' totals and the rows before the
// CTA's first chunk. Every CTA reads the whole chunks x E count table for them (65 K words at
// DeepSeek-V3's real E), so its loads are the cost: column-wise, a thread sums one expert over a
// slice of the chunks with kPlaceLoads loads in flight (read row-wise, a load then its atomics, the
// step took 19 us at E 128 and 54 at E 256 on an H100, its grid barrier included: notes/moe.md
// session 41); integer sums, order-free, and the slices meet in shared-memory atomics. Under token
// dropping the plan goes to all_order and start[] stays in the scratch (step 4 writes the kept one).
// totals_known(start): all threads of every CTA, once the experts' totals are summed (start[e + 1] -
// start[e]: the rows of expert e before any dropping), before the chunks are placed.
constexpr i32 kPlaceLoads = 8;  // count-table loads a thread has in flight (place_chunks)
template <class TotalsKnown>
KOSMOS_DEVICE void place_chunks(const RouteParams& r, u8* scratch, const TotalsKnown& totals_known) {
  i32* __restrict__ order = r.capacity < 0 ? r.order : r.all_order;
  const i32 k = r.rule.top_k, E = r.rule.experts, T = r.tokens, chunks = chunks_of(T);
  const i32 per = (chunks + i32(gridDim.x) - 1) / i32(gridDim.x), first = i32(blockIdx.x) * per;
  const i32 last = min(first + per, chunks);
  i32* start = reinterpret_cast<i32*>(scratch);  // [E + 1]: the totals, then start[]
  i32* before = start + E + 1;                     // [E]: rows of each expert ahead of the chunk placed
  i32* ex = before + E;                            // [kChunk * k]: that chunk's pair experts
  for (i32 e = i32(threadIdx.x); e <= E; e += i32(blockDim.x)) start[e] = 0;
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x)) before[e] = 0;
  __syncthreads();
  const i32* __restrict__ counts = r.counts;
  const i32 slices = max(1, i32(blockDim.x) / E);  // threads an expert (blockDim % E of them idle)
  for (i32 w = i32(threadIdx.x); w < E * slices; w += i32(blockDim.x)) {
    const i32 e = w % E, slice = w / E;
    i32 total = 0, ahead = 0;
    for (i32 c0 = slice * kPlaceLoads; c0 < chunks; c0 += slices * kPlaceLoads) {
      i32 n[kPlaceLoads];
#pragma unroll
      for (i32 u = 0; u < kPlaceLoads; ++u) n[u] = c0 + u < chunks ? counts[i64(c0 + u) * E + e] : 0;
#pragma unroll
      for (i32 u = 0; u < kPlaceLoads; ++u) {
        total += n[u];
        if (c0 + u < first) ahead += n[u];
      }
    }
    if (total != 0) atomicAdd(&start[e + 1], total);
    if (ahead != 0) atomicAdd(&before[e], ahead);
  }
  __syncthreads();
  cta_inclusive_scan(start + 1, E);  // (start[0] is 0)
  if (blockIdx.x == 0 && threadIdx.x == 0 && (!r.prob_sums || T == 0))
    r.losses[0] = r.losses[1] = 0.0f;  // else: route_losses
  totals_known(static_cast<const i32*>(start));
  if (blockIdx.x == 0 && r.capacity < 0)
    for (i32 e = i32(threadIdx.x); e <= E; e += i32(blockDim.x)) r.start[e] = start[e];
  for (i32 c = first; c < last; ++c) {
    const i32 t0 = c * kChunk, n = (min(t0 + kChunk, T) - t0) * k;
    for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) ex[i] = r.experts[i64(t0) * k + i];
    __syncthreads();
    for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) {
      const i32 p = t0 * k + i, row = start[ex[i]] + before[ex[i]] + rank_in_chunk(ex, i);
      order[row] = p;
      r.slot[p] = row;
    }
    __syncthreads();
    for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x)) before[e] += counts[i64(c) * E + e];
    __syncthreads();
  }
}

}  // namespace moe
}  // namespace kosmos
