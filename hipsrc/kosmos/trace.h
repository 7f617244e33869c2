// Per-CTA phase timestamps: where a fused kernel's time goes. Only in -DKOSMOS_PHASE_TRACE builds
// (notes/debug/phases.py prints the timeline); elsewhere phase_mark compiles to nothing.
// kosmos_phase_trace[cta][slot] = now_ns() when the CTA passed the slot's point:
//   0 entry   1 its dispatch part done (pushed, or the counts loaded)   2 builder ready
//   8 builder call done   9 combine done   10 its combine push done (the fold follows)
//   11 its side pushes done (movers 0)
//   3..6 the routing step's round (route_rounds.h): rows staged, and thread 0's token: its row's
//        max / exp-sum, its top-k, its norm and stores
//   12..15 the routing in the launch: router GEMM, routed, plan placed, pairs past capacity dropped
//   16..31 a builder job done (job_slot: the call's last job's is 31)
#pragma once
#include "platform.h"

#ifdef KOSMOS_PHASE_TRACE
extern "C" {  // C linkage: the host finds it by this name (RawModule.get_global)
__device__ kosmos::u64 kosmos_phase_trace[1024 * 32];
}
#endif

// Per-unit edges of the Hopper builder's units, in -DKOSMOS_TILE_TRACE builds only
// (notes/debug/tile_trace.py): kosmos_tile_trace[cta][0] = the CTA's consumers entered the
// builder, [1 + 2 i] its unit i's first stage landed, [2 + 2 i] unit i's epilogue issued (i < 31).
#ifdef KOSMOS_TILE_TRACE
extern "C" {
__device__ kosmos::u64 kosmos_tile_trace[1024 * 64];
}
#endif

namespace kosmos {

constexpr int kPhaseSlots = 32;
constexpr int kTileTraceSlots = 64;

// The slot of a builder call's job with `after` jobs after it in the call.
template <int after>
KOSMOS_DEVICE constexpr int job_slot() {
  static_assert(after >= 0 && after < 16, "phase trace: a builder call of at most 16 jobs");
  return kPhaseSlots - 1 - after;
}

// Called by every thread that passes the point; thread `by` of the CTA records it.
KOSMOS_DEVICE void phase_mark(int slot, u32 by = 0) {
#ifdef KOSMOS_PHASE_TRACE
  if (threadIdx.x == by) kosmos_phase_trace[blockIdx.x * kPhaseSlots + slot] = now_ns();
#else
  (void)slot;
  (void)by;
#endif
}

// slot 0 (unit < 0: entry) or unit's edge (0: first stage landed, 1: epilogue issued), by the
// first consumer thread.
KOSMOS_DEVICE void tile_mark(int unit, int edge) {
#ifdef KOSMOS_TILE_TRACE
  if (threadIdx.x == 128 && unit < 31)
    kosmos_tile_trace[blockIdx.x * kTileTraceSlots + (unit < 0 ? 0 : 1 + 2 * unit + edge)] = now_ns();
#else
  (void)unit;
  (void)edge;
#endif
}

}  // namespace kosmos
