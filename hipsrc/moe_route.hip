// MoE routing and the dispatch plan as standalone kernels (kosmos/moe/route.py); the forward
// megakernel runs the same code as its first phases.
//
//   kosmos_moe_route   one thread per token: experts [T, k] and weights [T, k] (kosmos/moe/route.h)
//   kosmos_moe_count   one thread per chunk of kChunk tokens: counts[chunk][e] of its (token, j) pairs
//   kosmos_moe_scan    one CTA: offsets[chunk][e] = rows before (chunk, e) in expert-major, chunk-minor
//                      order, and start[e] (E + 1 entries: start[E] = T * k)
//   kosmos_moe_place   one thread per chunk: order[row] = t * k + j and slot[t * k + j] = row
//
// The plan is the stable counting sort of the pairs by expert (expert-major, then token, then j):
// no atomics, so it is the same on every run, and the row order of each expert fixes the wgrad's
// accumulation order. Counts and offsets are plain sequential sums per thread.
#include "kosmos/moe/route.h"

using namespace kosmos;
using namespace kosmos::moe;

extern "C" __global__ void kosmos_moe_route(RouteRule rule, const float* __restrict__ logits, i64 ld, i32 tokens,
                                            i32* __restrict__ experts, float* __restrict__ weights) {
  const i32 t = i32(blockIdx.x) * i32(blockDim.x) + i32(threadIdx.x);
  if (t >= tokens) return;
  route_token(rule, logits + t * ld, experts + i64(t) * rule.top_k, weights + i64(t) * rule.top_k);
}

extern "C" __global__ void kosmos_moe_count(const i32* __restrict__ experts, i32 tokens, i32 top_k, i32 num_experts,
                                            i32* __restrict__ counts) {
  const i32 c = i32(blockIdx.x) * i32(blockDim.x) + i32(threadIdx.x);
  const i32 chunks = (tokens + kChunk - 1) / kChunk;
  if (c >= chunks) return;
  i32* mine = counts + i64(c) * num_experts;
  for (i32 e = 0; e < num_experts; ++e) mine[e] = 0;
  const i64 lo = i64(c) * kChunk * top_k, hi = min(i64(c + 1) * kChunk, i64(tokens)) * top_k;
  for (i64 p = lo; p < hi; ++p) ++mine[experts[p]];
}

// One CTA: thread e (strided) runs down the chunks of expert e; then one pass over the experts'
// totals; then every (chunk, e) offset gets its expert's start added.
extern "C" __global__ void kosmos_moe_scan(i32* __restrict__ offsets, const i32* __restrict__ counts, i32 chunks,
                                           i32 num_experts, i32* __restrict__ start) {
  for (i32 e = i32(threadIdx.x); e < num_experts; e += i32(blockDim.x)) {
    i32 run = 0;
    for (i32 c = 0; c < chunks; ++c) {
      offsets[i64(c) * num_experts + e] = run;
      run += counts[i64(c) * num_experts + e];
    }
    start[e + 1] = run;  // the expert's total, for now
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
    for (i32 e = 0; e < num_experts; ++e) start[e + 1] += start[e];
  }
  __syncthreads();
  for (i32 e = i32(threadIdx.x); e < num_experts; e += i32(blockDim.x))
    for (i32 c = 0; c < chunks; ++c) offsets[i64(c) * num_experts + e] += start[e];
}

extern "C" __global__ void kosmos_moe_place(const i32* __restrict__ experts, i32 tokens, i32 top_k, i32 num_experts,
                                            i32* __restrict__ offsets, i32* __restrict__ order, i32* __restrict__ slot) {
  const i32 c = i32(blockIdx.x) * i32(blockDim.x) + i32(threadIdx.x);
  const i32 chunks = (tokens + kChunk - 1) / kChunk;
  if (c >= chunks) return;
  i32* next = offsets + i64(c) * num_experts;  // this chunk's row of the offsets: only this thread's
  const i64 lo = i64(c) * kChunk * top_k, hi = min(i64(c + 1) * kChunk, i64(tokens)) * top_k;
  for (i64 p = lo; p < hi; ++p) {
    const i32 row = next[experts[p]]++;
    order[row] = i32(p);
    slot[p] = row;
  }
}
