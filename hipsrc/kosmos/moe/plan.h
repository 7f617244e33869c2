// The dispatch plan: the stable counting sort of (token, j) pairs by expert (expert-major, then
// token, then j), and the router's losses, as per-thread steps with no atomics (the same result on
// every run). hipsrc/moe_route.hip launches them; the forward megakernel runs them as phases.
//
//   count_chunk  one thread per chunk of kChunk tokens: its pairs per expert, and (with losses)
//                its tokens' normalised scores summed per expert and their logsumexp^2 summed
//   scan_expert  one thread per expert: its rows before each chunk, its total, its mean score
//   place_chunk  one thread per chunk: order[row] = t * k + j, slot[t * k + j] = row
#pragma once
#include "route.h"

namespace kosmos {
namespace moe {

KOSMOS_DEVICE i32 chunks_of(i32 tokens) { return (tokens + kChunk - 1) / kChunk; }

// counts: [chunks][E] (this chunk's row only). prob_sums ([chunks][E] doubles) and lse_sq
// ([chunks]) are written when non-null, from the logits (the scores are recomputed: cheap, and
// the route step keeps no per-expert state).
KOSMOS_DEVICE void count_chunk(const RouteRule& r, const float* logits, i64 ld, i32 tokens, const i32* experts,
                               i32 c, i32* counts, double* prob_sums, double* lse_sq) {
  const i32 E = r.experts, t0 = c * kChunk, t1 = min(t0 + kChunk, tokens);
  i32* mine = counts + i64(c) * E;
  for (i32 e = 0; e < E; ++e) mine[e] = 0;
  for (i64 p = i64(t0) * r.top_k; p < i64(t1) * r.top_k; ++p) ++mine[experts[p]];
  if (!prob_sums) return;
  double* probs = prob_sums + i64(c) * E;
  for (i32 e = 0; e < E; ++e) probs[e] = 0.0;
  double z = 0.0;
  for (i32 t = t0; t < t1; ++t) {
    const float* row = logits + t * ld;
    const RowExp re = row_exp(row, E);  // the scores' normaliser (softmax) and the logsumexp, once
    const Scorer score = make_scorer(r, row, re);
    float total = 0.0f;  // softmax: 1 up to rounding; sigmoid: the scores' sum (the reference's normaliser)
    for (i32 e = 0; e < E; ++e) total += score(e);
    for (i32 e = 0; e < E; ++e) probs[e] += double(score(e) / total);
    const double lse = double(re.max) + log(double(re.sum));
    z += lse * lse;
  }
  lse_sq[c] = z;
}

// Expert e's offsets[c][e] = rows of e in chunks before c (start[e] is added by the caller once the
// totals are scanned); returns e's total. mean_prob[e] (when prob_sums is non-null): e's normalised
// score averaged over the tokens.
KOSMOS_DEVICE i32 scan_expert(i32 e, i32 E, i32 chunks, i32 tokens, const i32* counts, i32* offsets,
                              const double* prob_sums, float* mean_prob) {
  i32 run = 0;
  double p = 0.0;
  for (i32 c = 0; c < chunks; ++c) {
    offsets[i64(c) * E + e] = run;
    run += counts[i64(c) * E + e];
    if (prob_sums) p += prob_sums[i64(c) * E + e];
  }
  if (prob_sums) mean_prob[e] = float(p / tokens);
  return run;
}

// next: this chunk's row of the offsets (start[e] already added); advanced in place.
KOSMOS_DEVICE void place_chunk(i32 c, const i32* experts, i32 tokens, i32 top_k, i32 E, i32* offsets, i32* order,
                               i32* slot) {
  i32* next = offsets + i64(c) * E;
  const i64 lo = i64(c) * kChunk * top_k, hi = i64(min((c + 1) * kChunk, tokens)) * top_k;
  for (i64 p = lo; p < hi; ++p) {
    const i32 row = next[experts[p]]++;
    order[row] = i32(p);
    slot[p] = row;
  }
}

// The losses from the scanned totals (start[E + 1]) and mean scores: what reference.route returns.
struct RouterLosses {
  float aux, z;
};
KOSMOS_DEVICE RouterLosses router_losses(i32 E, i32 tokens, i32 top_k, const i32* start, const float* mean_prob,
                                         const double* lse_sq, i32 chunks, float aux_coef, float z_coef) {
  double aux = 0.0, z = 0.0;
  for (i32 e = 0; e < E; ++e) aux += double(start[e + 1] - start[e]) / (double(tokens) * top_k) * mean_prob[e];
  for (i32 c = 0; c < chunks; ++c) z += lse_sq[c];
  return RouterLosses{float(aux_coef * E * aux), float(z_coef * (z / tokens))};
}

}  // namespace moe
}  // namespace kosmos
