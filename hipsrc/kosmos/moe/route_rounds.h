// The MoE forward megakernel's routing, step 2 (router.h): CTA b routes chunks b, b + grid, ...
// (kChunk tokens each, kRouteLanes lanes a token, kRoundChunks chunks a round) and counts each
// chunk's pairs per expert (+ the losses' partials), the same bits as the standalone kernels
// (hipsrc/moe_route.hip). Apart from router.h so the host can run it on an emulated CTA
// (tests/host/cta_main.cpp).
#pragma once
#include "../trace.h"
#include "plan.h"

namespace kosmos {
namespace moe {

// Step 2 routes each token by kRouteLanes consecutive lanes (route_token_lanes): one thread's
// token is latency-bound, ~0.5 us an expert at one warp per SM (notes/moe.md session 40).
#ifdef KOSMOS_ROUTE_LANES  // a knob for traces: notes/debug/phases.py -D KOSMOS_ROUTE_LANES=1 (or 2)
constexpr i32 kRouteLanes = KOSMOS_ROUTE_LANES;
#else
constexpr i32 kRouteLanes = 4;
#endif
constexpr i32 kRouteThreads = 384;  // the CTA (the builder's: router.h checks)
// Chunks a CTA routes at once, whole ones: with 8 lanes one chunk, the CTA's last 128 threads idle.
constexpr i32 kRoundChunks = kRouteThreads / (kChunk * kRouteLanes);
static_assert(kRoundChunks >= 1, "a chunk a round at least");

// The lent stages' layout in step 2: the round's pair experts, then its tokens' norms.
KOSMOS_DEVICE i32* round_experts(u8* scratch) { return reinterpret_cast<i32*>(scratch); }
KOSMOS_DEVICE TokenNorm* round_norms(u8* scratch) {
  return reinterpret_cast<TokenNorm*>(scratch + kRoundChunks * kChunk * kMaxTopK * sizeof(i32));
}
constexpr u32 kRouteScratchBytes = kRoundChunks * kChunk * (kMaxTopK * sizeof(i32) + sizeof(TokenNorm));
static_assert(kRouteScratchBytes % 16 == 0, "the staged rows start 16-byte aligned");
// Then, where they fit: the round's logits rows [kRoundChunks * kChunk][staged_ld(E)] and the bias
// [E]. The padded stride spreads a warp's tokens (8 of them, lanes sub = 0..3 reading experts sub,
// sub + 4, ...) over the banks: E apart, all 8 would read one bank.
KOSMOS_DEVICE i32 staged_ld(i32 experts) { return experts + 4; }
KOSMOS_DEVICE float* round_rows(u8* scratch) { return reinterpret_cast<float*>(scratch + kRouteScratchBytes); }
KOSMOS_DEVICE u32 staged_route_bytes(i32 experts) {
  return kRouteScratchBytes + u32(kRoundChunks * kChunk * staged_ld(experts) + experts) * u32(sizeof(float));
}
constexpr i32 kStageLoads = 8;  // logits loads a thread has in flight while staging a round

// W floats, one load or store: 4 (16 bytes, vec16) or 1.
template <int W>
struct alignas(4 * W) Floats {
  float f[W];
  KOSMOS_DEVICE void load(const float* p) {
    if constexpr (W == 4) *reinterpret_cast<vec16*>(f) = ld16(p);
    else f[0] = *p;
  }
  KOSMOS_DEVICE void store(float* p) const {
    if constexpr (W == 4) st16(p, *reinterpret_cast<const vec16*>(f));
    else *p = f[0];
  }
};

// The round's logits rows into shared memory (staged_ld apart), row jj * kChunk + i from token (first + jj * grid) *
// kChunk + i (the last token for those past T; nothing for chunks past the last); all threads, W floats a load.
template <int W>
KOSMOS_DEVICE void stage_round_rows_by(const RouteParams& r, float* rows, i32 first) {
  const i32 E = r.rule.experts, T = r.tokens, chunks = chunks_of(T), grid = i32(gridDim.x), EW = E / W;
  const i32 n = kRoundChunks * kChunk * EW;
  for (i32 v0 = i32(threadIdx.x); v0 < n; v0 += kStageLoads * i32(blockDim.x)) {
    Floats<W> x[kStageLoads] = {};
#pragma unroll
    for (i32 u = 0; u < kStageLoads; ++u) {
      const i32 v = v0 + u * i32(blockDim.x), row = v / EW, e = (v - row * EW) * W, c = first + (row / kChunk) * grid;
      if (v < n && c < chunks) x[u].load(r.logits + i64(min(c * kChunk + row % kChunk, T - 1)) * r.ld + e);
    }
#pragma unroll
    for (i32 u = 0; u < kStageLoads; ++u) {
      const i32 v = v0 + u * i32(blockDim.x), row = v / EW;
      if (v < n && first + (row / kChunk) * grid < chunks) x[u].store(rows + row * staged_ld(E) + (v - row * EW) * W);
    }
  }
}

// 16-byte loads where every row starts 16-byte aligned (E and the stride multiples of 4 floats):
// a thread's 8 loads in flight then carry 128 bytes, not 32 (DeepSeek-V3's real E staged 96 KB a
// CTA in 10 us by 4-byte loads, notes/moe.md session 43).
KOSMOS_DEVICE void stage_round_rows(const RouteParams& r, float* rows, i32 first) {
  if (r.rule.experts % 4 == 0 && r.ld % 4 == 0 && reinterpret_cast<u64>(r.logits) % 16 == 0)
    stage_round_rows_by<4>(r, rows, first);
  else
    stage_round_rows_by<1>(r, rows, first);
}

// Step 2, all threads of a CTA. Where the lent stages hold them, the round's logits rows and the
// bias are staged in shared memory first: a token's lanes read its row several times (row_exp, the
// choice, its norm; the chunk's prob sums), each an L2 round trip at one warp's latency otherwise
// (the routing step took 21 us at Qwen3-30B's real E 128 and 63 at DeepSeek-V3's 256 on an H100,
// notes/moe.md session 41). The same values, so the same bits.
// lendable: the bytes at scratch the CTA may use (the builder's lent stages).
KOSMOS_DEVICE void route_chunks(const RouteParams& r, u8* scratch, u32 lendable) {
  RouteRule rule = r.rule;
  const i32 k = rule.top_k, E = rule.experts, T = r.tokens, chunks = chunks_of(T), grid = i32(gridDim.x);
  i32* ex = round_experts(scratch);  // [kRoundChunks][kChunk * k]
  TokenNorm* norms = round_norms(scratch);
  float* rows = round_rows(scratch);
  const bool staged = staged_route_bytes(E) <= lendable;
  if (staged && rule.bias) {
    float* bias = rows + kRoundChunks * kChunk * staged_ld(E);
    for (i32 e = i32(threadIdx.x); e < E; e += i32(blockDim.x)) bias[e] = rule.bias[e];
    rule.bias = bias;  // (read after the round's first __syncthreads)
  }
  // chunk j of the round; its token `lane`; this thread's place `sub` among the token's lanes
  const i32 j = i32(threadIdx.x) / (kChunk * kRouteLanes), q = i32(threadIdx.x) % (kChunk * kRouteLanes);
  const i32 lane = q / kRouteLanes, sub = q % kRouteLanes;
  for (i32 first = i32(blockIdx.x); first < chunks; first += kRoundChunks * grid) {
    if (staged) {
      stage_round_rows(r, rows, first);
      __syncthreads();
      phase_mark(3);
    }
    const i32 c = first + j * grid, t = c * kChunk + lane;
    // (whole warps: a token's lanes shuffle together, so the lanes of a partial chunk's missing
    // tokens route the last token again and write nothing)
    if (j < kRoundChunks && c < chunks) {
      const bool writes = t < T && sub == 0;
      const float* row = staged ? rows + (j * kChunk + lane) * staged_ld(E) : r.logits + min(t, T - 1) * r.ld;
      i32* mine = ex + j * kChunk * k + lane * k;
      // the row's max and exp-sum once for the rule and the losses' norm
      const RowExp re = r.prob_sums ? row_exp(row, E) : rule_row_exp(rule, row);
      phase_mark(4);  // (slots 4-6: thread 0's token, the steps of one token's routing)
      route_token_lanes<kRouteLanes>(rule, row, re, sub, writes ? mine : nullptr, r.weights + i64(t) * k);
      phase_mark(5);
      if (writes) {
        for (i32 s = 0; s < k; ++s) r.experts[i64(t) * k + s] = mine[s];
        if (r.prob_sums) norms[j * kChunk + lane] = token_norm(rule, row, re);
      }
      phase_mark(6);
    }
    __syncthreads();
    phase_mark(18);
    for (i32 v = i32(threadIdx.x); v < kRoundChunks * E; v += i32(blockDim.x)) {
      const i32 jj = v / E, e = v - jj * E, cc = first + jj * grid;
      if (cc >= chunks) continue;
      const i32 t0 = cc * kChunk, t1 = min(t0 + kChunk, T);
      r.counts[i64(cc) * E + e] = chunk_count(ex + jj * kChunk * k, (t1 - t0) * k, e);
      if (r.prob_sums) {
        const float* chunk_rows = staged ? rows + jj * kChunk * staged_ld(E) : r.logits + t0 * r.ld;
        r.prob_sums[i64(cc) * E + e] =
            chunk_prob_sum(rule, chunk_rows, staged ? staged_ld(E) : r.ld, t1 - t0, norms + jj * kChunk, e);
      }
    }
    if (r.prob_sums && i32(threadIdx.x) < kRoundChunks) {
      const i32 cc = first + i32(threadIdx.x) * grid;
      if (cc < chunks) {
        const i32 t0 = cc * kChunk, t1 = min(t0 + kChunk, T);
        double z = 0.0;
        for (i32 t = t0; t < t1; ++t) z += norms[i32(threadIdx.x) * kChunk + t - t0].lse2;
        r.lse_sq[cc] = z;
      }
    }
    __syncthreads();
  }
}

}  // namespace moe
}  // namespace kosmos
