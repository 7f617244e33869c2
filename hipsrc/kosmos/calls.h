// A plan's call count on the device. A launch takes its epoch (the number its cross-rank flags are
// compared with, flags.h) from the count at entry, and its last CTA out advances the count. So
// nothing in a launch's arguments changes from call to call, and a captured CUDA graph replays with
// the right epochs. words[0]: calls completed; words[1]: CTAs out of the running launch. Every
// rank's plan makes the same calls in the same order, so the counts agree across ranks.
#pragma once
#include "platform.h"

namespace kosmos {

// All threads, last thing a CTA does: count it out in *out; true on thread 0 of the launch's last
// CTA, which has reset *out for the next launch (state that outlives a launch is reset on the
// device, so no launch depends on the host: gemm::queue_exit, CallScope).
KOSMOS_DEVICE bool last_cta_out(u64* out) {
  __syncthreads();
  if (threadIdx.x == 0 && atomic_add_acq_rel_dev(out, 1ull) == u64(gridDim.x) - 1) {
    *out = 0;
    return true;
  }
  return false;
}

// A launch that runs two plans' protocols (the MoE forward: a dispatch and a combine) takes an
// epoch from each plan's count: scope 0 and scope 1. Each plan's epochs stay consecutive (the
// dispatch's parity slots rely on it) however its calls mix with the other's.
constexpr int kCallScopes = 2;

KOSMOS_DEVICE u64& call_epoch_slot(int scope) {
  __shared__ u64 epochs[kCallScopes];
  return epochs[scope];
}

// This launch's epoch of scope `scope`, on every thread, inside that CallScope.
KOSMOS_DEVICE u64 call_epoch(int scope = 0) { return call_epoch_slot(scope); }

// For the whole kernel body, on every thread of every CTA (the body may return early, but every
// thread must leave through the scope: its exit is a CTA barrier).
struct CallScope {
  u64* words;
  int scope;
  KOSMOS_DEVICE explicit CallScope(u64* w, int s = 0) : words(w), scope(s) {
    // Nobody writes words[0] before every CTA has passed here (the last one out does).
    if (threadIdx.x == 0) call_epoch_slot(scope) = ld_acquire_dev(&words[0]) + 1;
    __syncthreads();
  }
  KOSMOS_DEVICE ~CallScope() {
    if (last_cta_out(&words[1])) words[0] = call_epoch(scope);  // the next launch on the stream reads it
  }
};

}  // namespace kosmos
