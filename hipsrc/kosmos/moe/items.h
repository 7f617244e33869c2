// Work items of the MoE movers: chunks of runs of rows, claimed from a per-call queue. Shared by
// the dispatch and the combine.
#pragma once
#include "../flags.h"
#include "../mover.h"

namespace kosmos {
namespace moe {

// The next item of this call's queue, for the whole CTA.
KOSMOS_DEVICE i64 claim_item(FusedHeads* heads) {
  __shared__ i64 s_item;
  return cta_broadcast(&s_item, threadIdx.x == 0 ? i64(atomic_add_relaxed_dev(&heads->mover, 1ull)) : i64(0));
}

// The run an item belongs to: chunk_start[v] is run v's first item (a prefix over `runs` runs, empty
// runs sharing their successor's value), so it is the last v with chunk_start[v] <= item.
KOSMOS_DEVICE i32 run_of(const i32* chunk_start, i32 runs, i64 item) {
  i32 v = 0;
  for (i32 lo = 0, hi = runs - 1; lo <= hi;) {
    const i32 mid = (lo + hi) / 2;
    if (chunk_start[mid] <= item) {
      v = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return v;
}

// After the CTA's copy of an item (all threads): count it; the last of `items` releases *flag = epoch
// (system scope: it may be a peer's), covering every item's copy (each CTA fences before counting).
KOSMOS_DEVICE void item_done(u64* counter, u64 items, u64* flag, u64 epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    if (atomic_add_acq_rel_dev(counter, 1ull) + 1 == items) st_release_sys(flag, epoch);
  }
}

}  // namespace moe
}  // namespace kosmos
