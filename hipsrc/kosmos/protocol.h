// The cross-rank protocol steps every op kernel shares: wait for peers to release this rank's
// buffers, count a CTA's arrival (the last one acts), and raise a flag on every peer.
#pragma once
#include "flags.h"
#include "mover.h"
#include "wait.h"

namespace kosmos {

// Thread 0 waits until every peer has finished with this rank's buffers from the last call.
KOSMOS_DEVICE bool wait_peers_done(const WaitCtx& w, const OpFlags* mine, int rank, int world, u64 epoch) {
  __shared__ int s_ok;
  int ok = 1;
  if (threadIdx.x == 0)
    for (int p = 0; p < world && ok; ++p)
      if (p != rank) ok = wait_flag_sys(w, SITE_PEER_DONE, &mine->done[p], epoch - 1);
  return cta_broadcast(&s_ok, ok);
}

// Called by thread 0 after __syncthreads: this CTA's writes are made visible system-wide and
// counted; the CTA that completes the count (n per call) returns true.
KOSMOS_DEVICE bool arrive_last(u64* counter, u64 epoch, u64 n) {
  fence_acq_rel_sys();
  return atomic_add_acq_rel_dev(counter, 1) + 1 == epoch * n;
}

// Thread 0 tells every peer p that this rank's ready (or done) flag reached epoch.
KOSMOS_DEVICE void signal_peers(const u64* peer_bases, u64 flags_off, int rank, int world, u64 epoch,
                                bool ready) {
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    OpFlags* f = flags_of(peer_bases, p, flags_off);
    st_release_sys(ready ? &f->ready[rank] : &f->done[rank], epoch);
  }
}

}  // namespace kosmos
