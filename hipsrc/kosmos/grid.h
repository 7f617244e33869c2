// A barrier over every CTA of a launch whose CTAs are all resident (the persistent grids): no CTA
// leaves it before all have arrived. Two words that outlive the launch, and no host reset:
// words[0] counts this barrier's arrivals (the last CTA to arrive puts it back to 0), words[1] the
// barriers completed so far. A CTA reads the count before it arrives, so the count it waits for
// cannot have passed yet; the last arrival zeroes the arrivals before it releases the count, so no
// CTA arrives at the next barrier before the zero.
#pragma once
#include "mover.h"
#include "wait.h"

namespace kosmos {

// All threads of every CTA. False (on every thread of the CTA) when the wait gave up (wait.h).
KOSMOS_DEVICE bool grid_barrier(u64* words, const WaitCtx& w) {
  __shared__ int s_ok;
  __syncthreads();  // the CTA's writes before its arrival
  int ok = 1;
  if (threadIdx.x == 0) {
    const u64 done = ld_acquire_dev(&words[1]);
    fence_acq_rel_dev();  // every thread's writes, seen through the barrier above, before the arrival
    if (atomic_add_acq_rel_dev(&words[0], 1ull) == u64(gridDim.x) - 1) {
      words[0] = 0;
      fence_acq_rel_dev();
      st_release_dev(&words[1], done + 1);
    } else {
      ok = wait_flag_dev(w, SITE_GRID, &words[1], done + 1) ? 1 : 0;
    }
  }
  return cta_broadcast(&s_ok, ok) != 0;
}

}  // namespace kosmos
