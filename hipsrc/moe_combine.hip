// The MoE combine + fold as a standalone kernel (kosmos/moe/combine.py, kosmos/moe/combine.h).
// Resident grid; dynamic shared memory combine_smem_bytes(world, experts, e_loc).
#include "kosmos/moe/combine.h"

using namespace kosmos;
using namespace kosmos::moe;

extern "C" __global__ void kosmos_moe_combine(const CombineParams d) { combine(d); }

// After a dispatch that moved nothing (status != 0: an overflow or a refusal, the same on every
// rank), NaN into n fp32 words (the backward's weight gradients); otherwise nothing is read or
// written past the status word, so the common case costs a launch and not a pass over the data.
extern "C" __global__ void kosmos_moe_nan_if_failed(const i64* status, u32* data, u64 n) {
  if (*status == 0) return;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) data[i] = 0x7FC00000u;
}
