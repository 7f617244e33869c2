// The router's backward per token (kosmos/moe/reference.py router_logit_grads, the rule checked by
// finite differences): each pair's combine-weight gradient d w = <its expert output, dY> from the
// forward's combine buffer, then d logits through the normalisation, the score (softmax or
// sigmoid), the aux loss and the z loss. One warp per token, fp32, sums in a fixed order (the same
// bits on every run). The standalone kernel (hipsrc/moe_backward.hip) and the fused backward
// (backward.h) run this same code; every product that meets a sum is an explicit fmaf, so no
// compiler contraction can make the two differ.
#pragma once
#include "layout.h"
#include "route.h"

namespace kosmos {
namespace moe {

// Mirrored: kosmos/moe/router_grads.py ROUTER_GRADS_DTYPE.
struct RouterGrads {
  const u16* comb;      // the forward's combine buffer (pair p's expert output at row slot[p]), bf16; null:
                        // d_weights is the input
  const u16* own_y;     // the forward's expert outputs, where the rows its own experts sent this rank
  const i32* own_runs;  // stayed (combine.h own_in_place), found through own_runs [3][e_loc]; or null
  const i32* slot;      // [T k] (-1: a dropped pair, d w 0)
  const u16* dy;        // [T, hidden] bf16
  const i64* status;    // the forward dispatch's: nonzero, it moved nothing (d w NaN)
  float* d_weights;     // [T, k] fp32: written (with comb; may be null) or read (without)
  const float* logits;  // [T, ld_logits] fp32, the first `experts` columns the experts'
  const i32* chosen;    // [T, k] distinct experts
  const i32* start;     // [E + 1]: the pairs of each expert as a prefix (the aux loss's frac)
  u16* d_logits;        // [T, ld_out] bf16, columns past `experts` zero; or null
  float* d_logits_f32;  // [T, experts] fp32; or null
  i64 tokens, ld_logits, ld_out;
  i32 hidden, experts, top_k, softmax, normalize;
  float scaling, aux_coef, z_coef;
  i32 e_loc;
};

// Pairs [J0, J0 + kPairsAtOnce) of token t: each d w = <its expert output row, dY row> in fp32
// (hidden a multiple of 8), on every lane. The pairs' loads go out together and the dY vector once
// for all of them (a pair at a time left a warp one load's latency a 512 B step: phase 0 ran at
// ~1.1-1.6 TB/s); each pair's sum runs as it did alone (c ascending, u 0..7, then the butterfly).
constexpr int kPairsAtOnce = 8;
template <int J0>
KOSMOS_DEVICE void pair_weight_grads(const RouterGrads& r, i64 t, i32 lane, float (&dw)[kMaxTopK]) {
  const u16* rows[kPairsAtOnce];
  float acc[kPairsAtOnce];
#pragma unroll
  for (int q = 0; q < kPairsAtOnce; ++q) {
    acc[q] = 0.0f;
    rows[q] = nullptr;
    if (J0 + q < r.top_k) {
      const i32 s = r.slot[t * r.top_k + J0 + q];
      if (s >= 0) {  // (< 0: a dropped pair, d w 0)
        const i32 own = r.own_runs ? own_output_row(r.own_runs, r.e_loc, s) : -1;
        rows[q] = own >= 0 ? r.own_y + i64(own) * r.hidden : r.comb + i64(s) * r.hidden;
      }
    }
  }
  const u16* b = r.dy + t * r.hidden;
  for (i32 c = lane * 8; c < r.hidden; c += kWarpSize * 8) {
    const vec16 vb = ld16(b + c);
    vec16 va[kPairsAtOnce];
#pragma unroll
    for (int q = 0; q < kPairsAtOnce; ++q)
      if (rows[q]) va[q] = ld16(rows[q] + c);
    float fb[8];
    bf16x8_to_f32(vb, fb);
#pragma unroll
    for (int q = 0; q < kPairsAtOnce; ++q)
      if (rows[q]) {
        float fa[8];
        bf16x8_to_f32(va[q], fa);
#pragma unroll
        for (int u = 0; u < 8; ++u) acc[q] = fmaf(fa[u], fb[u], acc[q]);
      }
  }
  const bool failed = *r.status != 0;
#pragma unroll
  for (int q = 0; q < kPairsAtOnce; ++q)
    if (J0 + q < r.top_k) {
      const float v = warp_sum(acc[q]);
      dw[J0 + q] = failed ? __uint_as_float(0x7FC00000u) : v;
    }
}
static_assert(kMaxTopK == 2 * kPairsAtOnce, "router_grads_token takes the pairs in two calls");

// Token t's d logits from its pairs' d w (dw[j], j < top_k, on every lane).
KOSMOS_DEVICE void token_logit_grads(const RouterGrads& r, i64 t, i32 lane, const float (&dw)[kMaxTopK]) {
  const float* l = r.logits + t * r.ld_logits;
  const i32 n = r.experts, k = r.top_k;
  const float tokens = float(r.tokens);
  float m = -__int_as_float(0x7f800000), sumz = 0.0f;
  if (r.softmax || r.z_coef != 0.0f) {
    for (i32 e = lane; e < n; e += kWarpSize) m = fmaxf(m, l[e]);
    m = warp_max(m);
    float z = 0.0f;
    for (i32 e = lane; e < n; e += kWarpSize) z += expf(l[e] - m);
    sumz = warp_sum(z);
  }
  auto score = [&](i32 e) { return r.softmax ? expf(l[e] - m) / sumz : 1.0f / (1.0f + expf(-l[e])); };
  // the k chosen: d u_j through the normalisation w_j = c u_j / sum u (or c u_j)
  i32 ex[kMaxTopK];
  float du[kMaxTopK];
  float us = 0.0f, dwu = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    ex[j] = -1;
    if (j < k) {
      ex[j] = r.chosen[t * k + j];
      const float u = score(ex[j]);
      us += u;
      dwu = fmaf(dw[j], u, dwu);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) du[j] = r.normalize ? r.scaling / us * (dw[j] - dwu / us) : r.scaling * dw[j];
  auto d_chosen = [&](i32 e) {
    float d = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxTopK; ++j)
      if (j < k) d += ex[j] == e ? du[j] : 0.0f;
    return d;
  };
  // the aux loss coef E sum_e frac_e mean_t p_te (p: the row-normalised scores): d scores +=
  // (d_p - sum_e d_p p_e) / rows, d_p_e = coef E frac_e / T
  const float pairs = float(r.tokens * k);
  auto d_p = [&](i32 e) { return r.aux_coef * float(n) * (float(r.start[e + 1] - r.start[e]) / pairs) / tokens; };
  float rows = 1.0f, c_aux = 0.0f;
  if (r.aux_coef != 0.0f) {
    float a = 0.0f, b = 0.0f;
    for (i32 e = lane; e < n; e += kWarpSize) {
      const float p = score(e);
      a += p;
      b = fmaf(d_p(e), p, b);
    }
    rows = warp_sum(a);
    c_aux = warp_sum(b) / rows;
  }
  auto d_score = [&](i32 e) {
    float d = d_chosen(e);
    if (r.aux_coef != 0.0f) d += (d_p(e) - c_aux) / rows;
    return d;
  };
  float c_soft = 0.0f;
  if (r.softmax) {
    float c = 0.0f;
    for (i32 e = lane; e < n; e += kWarpSize) c = fmaf(d_score(e), score(e), c);
    c_soft = warp_sum(c);
  }
  const float z_scale = r.z_coef * 2.0f * (m + logf(sumz)) / tokens;  // the z loss coef mean_t lse_t^2
  for (i32 e = lane; e < n; e += kWarpSize) {
    const float p = score(e);
    float d = r.softmax ? p * (d_score(e) - c_soft) : d_score(e) * p * (1.0f - p);
    if (r.z_coef != 0.0f) d = fmaf(z_scale, expf(l[e] - m) / sumz, d);
    if (r.d_logits_f32) r.d_logits_f32[t * n + e] = d;
    if (r.d_logits) r.d_logits[t * r.ld_out + e] = f32_to_bf16(d);
  }
  if (r.d_logits)
    for (i64 e = n + lane; e < r.ld_out; e += kWarpSize) r.d_logits[t * r.ld_out + e] = 0;
}

// Token t, by one warp: its pairs' d w (from the combine buffer, stored to d_weights when given;
// or read from d_weights), then its d logits.
KOSMOS_DEVICE void router_grads_token(const RouterGrads& r, i64 t, i32 lane) {
  float dw[kMaxTopK];
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) dw[j] = 0.0f;
  if (r.comb) {
    pair_weight_grads<0>(r, t, lane, dw);
    if (r.top_k > kPairsAtOnce) pair_weight_grads<kPairsAtOnce>(r, t, lane, dw);
    if (r.d_weights && lane == 0)
#pragma unroll
      for (int j = 0; j < kMaxTopK; ++j)
        if (j < r.top_k) r.d_weights[t * r.top_k + j] = dw[j];
  } else {
#pragma unroll
    for (int j = 0; j < kMaxTopK; ++j)
      if (j < r.top_k) dw[j] = r.d_weights[t * r.top_k + j];
  }
  token_logit_grads(r, t, lane, dw);
}

// Every warp of the grid in turn: tokens warp, warp + all warps, ...
KOSMOS_DEVICE void router_grads_all(const RouterGrads& r) {
  const i32 warps = i32(blockDim.x) / kWarpSize, lane = i32(threadIdx.x) % kWarpSize;
  const i64 first = i64(blockIdx.x) * warps + i32(threadIdx.x) / kWarpSize, stride = i64(gridDim.x) * warps;
  for (i64 t = first; t < r.tokens; t += stride) router_grads_token(r, t, lane);
}

}  // namespace moe
}  // namespace kosmos
