// The MoE backward's elementwise steps as kernels (kosmos/moe/layer.py, MoELayer.backward): each
// reads bf16 and writes its result once, instead of chains of CuPy passes over fp32 temporaries.
//
//   kosmos_moe_weight_grads   32 threads per (token, j): d w[t, j] = <row(t, j), dy[t]> in fp32, where
//                             row(t, j) is the pair's expert output in the combine buffer; NaN after a
//                             failed dispatch
//   kosmos_moe_nan_if_failed  the weight gradients NaN after a failed dispatch
//   kosmos_moe_router_bwd     d logits from the combine weights' gradients, a CTA per token row
#include "kosmos/moe/route.h"
#include "kosmos/platform.h"

using namespace kosmos;

// h: row length (multiple of 8). 256 threads: 8 pairs a CTA, 32 threads a pair, reduced in shared
// memory in a fixed order (the same sum on every run, and no warp-width assumption).
extern "C" __global__ void __launch_bounds__(256) kosmos_moe_weight_grads(
    const u16* __restrict__ comb, const i32* __restrict__ slot, const u16* __restrict__ dy, i64 pairs, i32 top_k,
    i32 h, const i64* __restrict__ status, float* __restrict__ d_weights) {
  __shared__ float part[256];
  const i64 p = i64(blockIdx.x) * 8 + threadIdx.x / 32;
  const i32 lane = i32(threadIdx.x % 32);
  float acc = 0.0f;
  if (p < pairs && slot[p] >= 0) {  // a dropped pair (slot -1) contributed nothing: 0
    const u16* a = comb + i64(slot[p]) * h;
    const u16* b = dy + (p / top_k) * h;
    for (i32 c = lane * 8; c < h; c += 32 * 8) {
      float fa[8], fb[8];
      bf16x8_to_f32(ld16(a + c), fa);
      bf16x8_to_f32(ld16(b + c), fb);
      for (int u = 0; u < 8; ++u) acc += fa[u] * fb[u];
    }
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int off = 16; off > 0; off >>= 1) {
    if (lane < off) part[threadIdx.x] += part[threadIdx.x + off];
    __syncthreads();
  }
  if (lane == 0 && p < pairs) d_weights[p] = *status != 0 ? __uint_as_float(0x7FC00000u) : part[threadIdx.x];
}

// After a dispatch that moved nothing (status != 0: an overflow or a refusal, the same on every
// rank), `nan` (one fp32 NaN, or two bf16 ones) into n 32-bit words (the backward's weight
// gradients); otherwise nothing is read or written past the status word, so the common case costs
// a launch and not a pass over the data.
extern "C" __global__ void kosmos_moe_nan_if_failed(const i64* status, u32* data, u64 n, u32 nan) {
  if (*status == 0) return;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) data[i] = nan;
}

// ---- the router's backward: kosmos/moe/reference.py router_logit_grads, one CTA (64 threads) a
// token row, fp32, sums in a fixed tree order (the same bits on every run) ----
constexpr int kRouterThreads = 64;

KOSMOS_DEVICE float cta_reduce(float v, float* s, bool take_max) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kRouterThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) s[threadIdx.x] = take_max ? fmaxf(s[threadIdx.x], s[threadIdx.x + w])
                                                        : s[threadIdx.x] + s[threadIdx.x + w];
    __syncthreads();
  }
  const float r = s[0];
  __syncthreads();
  return r;
}

// logits [T, ld] (the first E columns are the experts'), chosen [T, k] (distinct experts),
// d_weights [T, k], frac [E] (the chosen share per expert, bincount / (T k): the aux loss's
// constant) -> d_logits [T, E]. The terms, per token: the normalisation w_j = c u_j / sum u (or
// c u_j), the score (softmax or sigmoid), the aux loss coef E sum_e frac_e mean_t p_te with p the
// row-normalised scores, the z-loss coef mean_t lse_t^2.
extern "C" __global__ void __launch_bounds__(kRouterThreads) kosmos_moe_router_bwd(
    const float* __restrict__ logits, i64 ld, const i32* __restrict__ chosen, const float* __restrict__ d_weights,
    const float* __restrict__ frac, i64 tokens, i32 experts, i32 top_k, i32 softmax, i32 normalize, float scaling,
    float aux_coef, float z_coef, float* __restrict__ d_logits) {
  __shared__ float red[kRouterThreads];
  __shared__ float du[moe::kMaxTopK];
  __shared__ i32 ex[moe::kMaxTopK];
  const int tid = threadIdx.x;
  for (i64 t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float* l = logits + t * ld;
    float m = -__int_as_float(0x7f800000), sumz = 0.0f;
    if (softmax || z_coef != 0.0f) {
      for (i32 e = tid; e < experts; e += kRouterThreads) m = fmaxf(m, l[e]);
      m = cta_reduce(m, red, true);
      float z = 0.0f;
      for (i32 e = tid; e < experts; e += kRouterThreads) z += expf(l[e] - m);
      sumz = cta_reduce(z, red, false);
    }
    auto score = [&](i32 e) { return softmax ? expf(l[e] - m) / sumz : 1.0f / (1.0f + expf(-l[e])); };
    if (tid == 0) {  // the k chosen: d u_j through the normalisation
      float us = 0.0f, dwu = 0.0f;
      for (i32 j = 0; j < top_k; ++j) {
        ex[j] = chosen[t * top_k + j];
        const float u = score(ex[j]);
        us += u;
        dwu += d_weights[t * top_k + j] * u;
      }
      for (i32 j = 0; j < top_k; ++j) {
        const float dw = d_weights[t * top_k + j];
        du[j] = normalize ? scaling / us * (dw - dwu / us) : scaling * dw;
      }
    }
    __syncthreads();
    auto d_chosen = [&](i32 e) {
      float d = 0.0f;
      for (i32 j = 0; j < top_k; ++j) d += ex[j] == e ? du[j] : 0.0f;
      return d;
    };
    float rows = 1.0f, c_aux = 0.0f;
    if (aux_coef != 0.0f) {  // d scores += (d_p - sum_e d_p p_e) / rows, d_p_e = coef E frac_e / T
      float a = 0.0f, b = 0.0f;
      for (i32 e = tid; e < experts; e += kRouterThreads) {
        const float p = score(e);
        a += p;
        b += aux_coef * float(experts) * frac[e] / float(tokens) * p;
      }
      rows = cta_reduce(a, red, false);
      c_aux = cta_reduce(b, red, false) / rows;
    }
    auto d_score = [&](i32 e) {
      float d = d_chosen(e);
      if (aux_coef != 0.0f) d += (aux_coef * float(experts) * frac[e] / float(tokens) - c_aux) / rows;
      return d;
    };
    float c_soft = 0.0f;
    if (softmax) {
      float c = 0.0f;
      for (i32 e = tid; e < experts; e += kRouterThreads) c += d_score(e) * score(e);
      c_soft = cta_reduce(c, red, false);
    }
    const float lse = m + logf(sumz);
    for (i32 e = tid; e < experts; e += kRouterThreads) {
      const float p = score(e);
      float d = softmax ? p * (d_score(e) - c_soft) : d_score(e) * p * (1.0f - p);
      if (z_coef != 0.0f) d += z_coef * 2.0f * lse / float(tokens) * (expf(l[e] - m) / sumz);
      d_logits[t * experts + e] = d;
    }
    __syncthreads();  // ex / du are the next row's
  }
}
