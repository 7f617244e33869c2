// MoE routing and the dispatch plan as standalone kernels (kosmos/moe/route.py); the forward
// megakernel runs the same steps (kosmos/moe/route.h, plan.h) as its first phases.
//
//   kosmos_moe_route   one thread per token: experts [T, k] and weights [T, k]
//   kosmos_moe_count   one CTA per chunk of kChunk tokens: counts[chunk][e] (+ the loss partials)
//   kosmos_moe_scan    one CTA: offsets[chunk][e] in expert-major, chunk-minor order, start[E + 1]
//                      (start[E] = T * k), and with losses mean_prob[E] and losses[2] = (aux, z)
//   kosmos_moe_place   one CTA per chunk: order[row] = t * k + j, slot[t * k + j] = row
//   kosmos_moe_keep    token dropping: a CTA per expert over capacity (grid-stride) compacts the
//                      plan over the pairs kept (capacity.h), into the order, slot and start given
// Count and place read the chunk's pair experts from shared memory (at most kChunk * kMaxTopK).
#include "kosmos/moe/capacity.h"
#include "kosmos/moe/plan.h"

using namespace kosmos;
using namespace kosmos::moe;

KOSMOS_DEVICE i32 global_thread() { return i32(blockIdx.x) * i32(blockDim.x) + i32(threadIdx.x); }

extern "C" __global__ void kosmos_moe_route(RouteRule rule, const float* __restrict__ logits, i64 ld, i32 tokens,
                                            i32* __restrict__ experts, float* __restrict__ weights) {
  const i32 t = global_thread();
  if (t < tokens) route_token(rule, logits + t * ld, experts + i64(t) * rule.top_k, weights + i64(t) * rule.top_k);
}

// This CTA's chunk: its tokens [t0, t1) and their pairs' experts in shared memory; returns the pairs.
KOSMOS_DEVICE i32 load_chunk(const i32* experts, i32 tokens, i32 top_k, i32* ex, i32& t0, i32& t1) {
  t0 = i32(blockIdx.x) * kChunk;
  t1 = min(t0 + kChunk, tokens);
  const i32 n = (t1 - t0) * top_k;
  for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) ex[i] = experts[i64(t0) * top_k + i];
  __syncthreads();
  return n;
}

// prob_sums/lse_sq null: no losses asked for.
extern "C" __global__ void kosmos_moe_count(RouteRule rule, const float* __restrict__ logits, i64 ld, i32 tokens,
                                            const i32* __restrict__ experts, i32* __restrict__ counts,
                                            double* __restrict__ prob_sums, double* __restrict__ lse_sq) {
  __shared__ i32 ex[kChunk * kMaxTopK];
  __shared__ TokenNorm norms[kChunk];
  i32 t0, t1;
  const i32 n = load_chunk(experts, tokens, rule.top_k, ex, t0, t1), E = rule.experts, c = i32(blockIdx.x);
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x)) counts[i64(c) * E + e] = chunk_count(ex, n, e);
  if (!prob_sums) return;
  for (i32 t = t0 + i32(threadIdx.x); t < t1; t += i32(blockDim.x)) norms[t - t0] = token_norm(rule, logits + t * ld);
  __syncthreads();
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x))
    prob_sums[i64(c) * E + e] = chunk_prob_sum(rule, logits + t0 * ld, ld, t1 - t0, norms, e);
  if (threadIdx.x == 0) {
    double z = 0.0;
    for (i32 t = t0; t < t1; ++t) z += norms[t - t0].lse2;
    lse_sq[c] = z;
  }
}

extern "C" __global__ void kosmos_moe_scan(i32 num_experts, i32 tokens, i32 top_k, const i32* __restrict__ counts,
                                           i32* __restrict__ offsets, i32* __restrict__ start,
                                           const double* __restrict__ prob_sums, const double* __restrict__ lse_sq,
                                           float* __restrict__ mean_prob, float aux_coef, float z_coef,
                                           float* __restrict__ losses) {
  const i32 E = num_experts, chunks = chunks_of(tokens);
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x))
    start[e + 1] = scan_expert(e, E, chunks, tokens, counts, offsets, prob_sums, mean_prob);  // totals, for now
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
    for (i32 e = 0; e < E; ++e) start[e + 1] += start[e];
    if (prob_sums) {
      const RouterLosses l = router_losses(E, tokens, top_k, start, mean_prob, lse_sq, chunks, aux_coef, z_coef);
      losses[0] = l.aux;
      losses[1] = l.z;
    }
  }
  __syncthreads();
  for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x))
    for (i32 c = 0; c < chunks; ++c) offsets[i64(c) * E + e] += start[e];
}

extern "C" __global__ void kosmos_moe_place(const i32* __restrict__ experts, i32 tokens, i32 top_k, i32 num_experts,
                                            const i32* __restrict__ offsets, i32* __restrict__ order,
                                            i32* __restrict__ slot) {
  __shared__ i32 ex[kChunk * kMaxTopK];
  i32 t0, t1;
  const i32 n = load_chunk(experts, tokens, top_k, ex, t0, t1);
  const i32* first = offsets + i64(blockIdx.x) * num_experts;  // start[e] already added
  for (i32 i = i32(threadIdx.x); i < n; i += i32(blockDim.x)) {
    const i64 p = i64(t0) * top_k + i;
    const i32 row = first[ex[i]] + rank_in_chunk(ex, i);
    order[row] = i32(p);
    slot[p] = row;
  }
}

// Dynamic shared memory: keep_words(E, blockDim.x) i32.
extern "C" __global__ void kosmos_moe_keep(KeepArgs a) {
  extern __shared__ __align__(16) i32 keep_smem[];
  keep_capacity(a, keep_smem, CtaPhases::here());
}
