// The symmetric heap's device-side barrier across ranks.
#include "kosmos/wait.h"

using namespace kosmos;

// One CTA: thread t tells peer t that this rank reached barrier `epoch`, then waits for peer
// t's own arrival in this rank's flags. flags_off: the barrier flags' offset in the heap
// (u64[world], slot r written by rank r).
extern "C" __global__ void kosmos_heap_barrier(const u64* __restrict__ peer_bases, u64 flags_off,
                                               int rank, int world, u64 epoch, WaitCtx wait) {
  const int t = threadIdx.x;
  if (t < world) {
    u64* theirs = reinterpret_cast<u64*>(peer_bases[t] + flags_off);
    st_release_sys(theirs + rank, epoch);
    const u64* mine = reinterpret_cast<const u64*>(peer_bases[rank] + flags_off);
    wait_flag_sys(wait, SITE_BARRIER, mine + t, epoch);
  }
}
