// The MoE backward's steps outside the experts' GEMMs as kernels (kosmos/moe/layer.py,
// MoELayer.backward): each reads bf16 and writes its result once, instead of chains of CuPy passes
// over fp32 temporaries.
//
//   kosmos_moe_router_grads   a warp per token: each pair's combine-weight gradient from its expert
//                             output in the combine buffer, then the token's d logits
//                             (kosmos/moe/router_grads.h, as the fused backward runs it)
//   kosmos_moe_nan_if_failed  the weight gradients NaN after a failed dispatch
#include "kosmos/moe/router_grads.h"

using namespace kosmos;

extern "C" __global__ void __launch_bounds__(256) kosmos_moe_router_grads(const moe::RouterGrads r) {
  moe::router_grads_all(r);
}

// After a dispatch that moved nothing (status != 0: an overflow or a refusal, the same on every
// rank), `nan` (one fp32 NaN, or two bf16 ones) into n 32-bit words (the backward's weight
// gradients); otherwise nothing is read or written past the status word, so the common case costs
// a launch and not a pass over the data.
extern "C" __global__ void kosmos_moe_nan_if_failed(const i64* status, u32* data, u64 n, u32 nan) {
  if (*status == 0) return;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) data[i] = nan;
}
