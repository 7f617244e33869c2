// The control words of one fused or collective op: one symmetric allocation per op plan.
//
// Cross-rank flags are compared against the op's epoch (the call number, 1, 2, ...) and never
// reset, so back-to-back calls cannot race on a reset. Local counters only ever grow too: a
// counter that gains `n` per call has reached epoch * n when this call's work is complete.
#pragma once
#include "platform.h"

namespace kosmos {

constexpr int kMaxWorld = 16;

// The fused kernels' queue heads. Their claim counts vary with the role switching, so the heads
// are reset rather than epoch-relative: call `epoch` claims from fused[epoch % 2] and, at its
// start, zeroes fused[(epoch + 1) % 2] for the next call. The call that last used those heads
// has finished (same stream), so no CTA needs to wait for another to reset them.
struct FusedHeads {
  u64 mover;  // movers' (or reducers') queue
  u64 tile;   // GEMM tile queue
  u64 join;   // builders that joined the reducers
};

struct OpFlags {
  u64 ready[kMaxWorld];   // [p]: peer p's input for this epoch is staged / pushed to me (written by p)
  u64 done[kMaxWorld];    // [p]: peer p has finished with my buffers for this epoch (written by p)
  u64 items[kMaxWorld];   // local: work items finished per peer
  u64 head;               // local, collectives: work-queue head (grows by a known amount per call)
  u64 staged;             // local: CTAs that finished staging this rank's input
  u64 exited;             // local: CTAs that finished the kernel
  FusedHeads fused[2];    // local, fused kernels: call `epoch` uses fused[epoch % 2] (see below)
  u64 spare[7];
};
static_assert(sizeof(OpFlags) == 64 * 8, "kosmos/plan.py allocates OpFlags as u64[FLAG_WORDS = 64]");

// Every thread calls this at the start of call `epoch` for this call's heads; thread 0 of CTA 0
// zeroes the next call's.
KOSMOS_DEVICE FusedHeads* fused_heads(OpFlags* mine, u64 epoch) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    FusedHeads& next = mine->fused[(epoch + 1) & 1];
    next.mover = next.tile = next.join = 0;
  }
  return &mine->fused[epoch & 1];
}

// This rank's flags, or peer p's copy of them, at `flags_off` in the symmetric heap.
KOSMOS_DEVICE OpFlags* flags_of(const u64* peer_bases, int p, u64 flags_off) {
  return reinterpret_cast<OpFlags*>(peer_bases[p] + flags_off);
}

// A claim from the op's work queue. The head only grows: each call takes n_items real claims
// plus one failed claim per CTA, so call `epoch` starts at (epoch - 1) * (n_items + grid).
KOSMOS_DEVICE u64 queue_base(u64 epoch, u64 n_items) { return (epoch - 1) * (n_items + gridDim.x); }

}  // namespace kosmos
