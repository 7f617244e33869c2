// The control words of one fused or collective op: one symmetric allocation per op plan.
//
// Cross-rank flags are compared against the op's epoch (the call number, 1, 2, ...) and never
// reset, so back-to-back calls cannot race on a reset. Local counters only ever grow too: a
// counter that gains `n` per call has reached epoch * n when this call's work is complete.
#pragma once
#include "platform.h"

namespace kosmos {

constexpr int kMaxWorld = 16;

struct OpFlags {
  u64 ready[kMaxWorld];   // [p]: peer p's input for this epoch is staged / pushed to me (written by p)
  u64 done[kMaxWorld];    // [p]: peer p has finished with my buffers for this epoch (written by p)
  u64 items[kMaxWorld];   // local: work items finished per peer
  u64 head;               // local: work-queue head (movers' queue in the fused kernels)
  u64 staged;             // local: CTAs that finished staging this rank's input
  u64 exited;             // local: CTAs that finished the kernel
  u64 tile_head;          // local, fused kernels: GEMM tile queue head, reset by the last CTA out
  u64 join_head;          // local, fused kernels: builders that joined the movers, reset likewise
  u64 spare[11];
};
static_assert(sizeof(OpFlags) == 64 * 8, "kosmos/collectives.py allocates OpFlags as u64[64]");

// This rank's flags, or peer p's copy of them, at `flags_off` in the symmetric heap.
KOSMOS_DEVICE OpFlags* flags_of(const u64* peer_bases, int p, u64 flags_off) {
  return reinterpret_cast<OpFlags*>(peer_bases[p] + flags_off);
}

// A claim from the op's work queue. The head only grows: each call takes n_items real claims
// plus one failed claim per CTA, so call `epoch` starts at (epoch - 1) * (n_items + grid).
KOSMOS_DEVICE u64 queue_base(u64 epoch, u64 n_items) { return (epoch - 1) * (n_items + gridDim.x); }

}  // namespace kosmos
