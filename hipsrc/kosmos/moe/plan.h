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
#pragma once
#include "route.h"

namespace kosmos {
namespace moe {

KOSMOS_DEVICE i32 chunks_of(i32 tokens) { return (tokens + kChunk - 1) / kChunk; }

// The shared i32 words the megakernel's placement of a chunk holds (router.h place_chunks: start[],
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

// norms[t - t0]: token_norm of the chunk's tokens [t0, t1).
KOSMOS_DEVICE double chunk_prob_sum(const RouteRule& r, const float* logits, i64 ld, i32 t0, i32 t1,
                                    const TokenNorm* norms, i32 e) {
  double p = 0.0;
  for (i32 t = t0; t < t1; ++t) {
    const TokenNorm& n = norms[t - t0];
    p += double(make_scorer(r, logits + t * ld, n.re)(e) / n.total);
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

}  // namespace moe
}  // namespace kosmos
