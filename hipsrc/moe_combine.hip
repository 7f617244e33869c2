// The MoE combine + fold as a standalone kernel (kosmos/moe/combine.py, kosmos/moe/combine.h).
// Resident grid; dynamic shared memory combine_smem_bytes(world, experts, e_loc).
#include "kosmos/moe/combine.h"

using namespace kosmos;
using namespace kosmos::moe;

extern "C" __global__ void kosmos_moe_combine(const CombineParams d) {
  const CallScope call(d.calls);
  combine(d);
}

