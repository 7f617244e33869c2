// The MoE dispatch as a standalone kernel (kosmos/moe/dispatch.py): counts through the heap, rows
// pushed to their final place in every owner's arena (kosmos/moe/dispatch.h). Any grid; dynamic
// shared memory dispatch_smem_bytes(world, experts).
#include "kosmos/moe/dispatch.h"

using namespace kosmos;
using namespace kosmos::moe;

extern "C" __global__ void kosmos_moe_dispatch(const DispatchParams d) {
  const CallScope call(d.calls);
  dispatch(d);
}
