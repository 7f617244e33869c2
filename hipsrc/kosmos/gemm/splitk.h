// Split-K's second step, one definition for every caller whose sums must agree bit for bit: the
// standalone GEMM's reduce kernels (gemm.hip) and the MoE forward launch's router logits
// (moe/router.h sum_router_partials, against the device path's router GEMM).
#pragma once
#include "../platform.h"

namespace kosmos {
namespace gemm {

// Split-K's second step: out = sum of the k_splits fp32 partials ws[split * stride + v], v < n,
// added in split order (bitwise deterministic), rounded once. n is a multiple of 4 (columns are
// multiples of 64); stride >= n (each split's partial is padded to whole tile rows).
template <class Store>
KOSMOS_DEVICE void splitk_reduce(const float* ws, i64 n, i32 splits, i64 stride, Store store) {
  for (i64 v = (i64(blockIdx.x) * blockDim.x + threadIdx.x) * 4; v < n; v += i64(gridDim.x) * blockDim.x * 4) {
    float4 acc = *reinterpret_cast<const float4*>(ws + v);
    for (i32 s = 1; s < splits; ++s) {
      const float4 x = *reinterpret_cast<const float4*>(ws + i64(s) * stride + v);
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
    }
    store(v, acc);
  }
}

}  // namespace gemm
}  // namespace kosmos
