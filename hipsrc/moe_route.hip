// MoE routing and the dispatch plan as standalone kernels (kosmos/moe/route.py); the forward
// megakernel runs the same steps (kosmos/moe/route.h, plan.h) as its first phases.
//
//   kosmos_moe_route   one thread per token: experts [T, k] and weights [T, k]
//   kosmos_moe_count   one thread per chunk of kChunk tokens: counts[chunk][e] (+ the loss partials)
//   kosmos_moe_scan    one CTA: offsets[chunk][e] in expert-major, chunk-minor order, start[E + 1]
//                      (start[E] = T * k), and with losses mean_prob[E] and losses[2] = (aux, z)
//   kosmos_moe_place   one thread per chunk: order[row] = t * k + j, slot[t * k + j] = row
#include "kosmos/moe/plan.h"

using namespace kosmos;
using namespace kosmos::moe;

KOSMOS_DEVICE i32 global_thread() { return i32(blockIdx.x) * i32(blockDim.x) + i32(threadIdx.x); }

extern "C" __global__ void kosmos_moe_route(RouteRule rule, const float* __restrict__ logits, i64 ld, i32 tokens,
                                            i32* __restrict__ experts, float* __restrict__ weights) {
  const i32 t = global_thread();
  if (t < tokens) route_token(rule, logits + t * ld, experts + i64(t) * rule.top_k, weights + i64(t) * rule.top_k);
}

// prob_sums/lse_sq null: no losses asked for.
extern "C" __global__ void kosmos_moe_count(RouteRule rule, const float* __restrict__ logits, i64 ld, i32 tokens,
                                            const i32* __restrict__ experts, i32* __restrict__ counts,
                                            double* __restrict__ prob_sums, double* __restrict__ lse_sq) {
  const i32 c = global_thread();
  if (c < chunks_of(tokens)) count_chunk(rule, logits, ld, tokens, experts, c, counts, prob_sums, lse_sq);
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
                                            i32* __restrict__ offsets, i32* __restrict__ order, i32* __restrict__ slot) {
  const i32 c = global_thread();
  if (c < chunks_of(tokens)) place_chunk(c, experts, tokens, top_k, num_experts, offsets, order, slot);
}
