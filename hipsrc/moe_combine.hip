// The MoE combine + fold as a standalone kernel (kosmos/moe/combine.py, kosmos/moe/combine.h).
// Resident grid; dynamic shared memory combine_smem_bytes(world, experts, e_loc).
#include "kosmos/moe/combine.h"

using namespace kosmos;
using namespace kosmos::moe;

// 3 CTAs of 384 threads (kosmos.collectives.MOVER_THREADS) an SM: at most 56 registers (the fold takes
// one vector a lane in flight for it: combine.h combine_fold; unbounded, ptxas took 60 after session
// 26's own_runs table, two CTAs an SM).
extern "C" __global__ void __launch_bounds__(384, 3) kosmos_moe_combine(const CombineParams d) {
  const CallScope call(d.calls);
  combine(d);
}

