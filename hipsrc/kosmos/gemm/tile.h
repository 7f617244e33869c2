// The GEMM builder component: what a persistent CTA calls to compute output tiles.
//
//   template <int L, class Claim, class Ready, class Epi>
//   bool kosmos::gemm::run_builder(const Problem& p, const TensorMap* tma, const TensorMap* tmb,
//                                  u8* smem, Claim& claim, const Ready& ready, const Epi& epi);
//
// Called by all kThreads threads of the CTA with kSmemBytes of dynamic shared memory at `smem`.
//   claim()          i32: the next work unit's queue index (tile_of maps it to (tm, tn, K-range)), or < 0 when
//                    this CTA should stop building (the queue is empty, or it should go back to
//                    moving data). Called by one thread; one claim per tile.
//   ready(tile, kb)  bool: the readiness hook, called by one thread before the loads of each
//                    kTileK-deep reduction slab kb of the unit, kb in [tile.kb0, tile.kb1)
//                    (kb == tile.kb0: before the unit starts; kb0 == 0 without split-K).
//                    It may wait (a bounded wait on flags); false aborts the builder. Ready::kTrivial
//                    = true skips it and the proxy fence that follows a non-trivial hook.
//   epi              a compile-time epilogue (epilogue.h): EpiStoreBf16, EpiStoreF32, EpiSwiGLU.
//                    Epi::done(tile) runs once per tile after all of its stores (completion point).
// Returns true when claim() ran dry, false when a readiness hook aborted.
// The CTA may use its shared memory and registers for something else after the call returns.
#pragma once
#include "arch.h"
#include "config.h"
#include "epilogue.h"
#if KOSMOS_GEMM_WGMMA
#include "builder_wgmma.h"
#else
#include "builder_portable.h"
#endif

namespace kosmos {
namespace gemm {

template <int L, class Claim, class Ready, class Epi>
KOSMOS_DEVICE bool run_builder(const Problem& p, const TensorMap* tma, const TensorMap* tmb, u8* smem, Claim& claim,
                               const Ready& ready, const Epi& epi) {
  return run_builder_arch<L>(p, tma, tmb, smem, claim, ready, epi);
}

// The standalone queue: a u64 head counter in device memory. The host passes `base`, the head's
// value before this launch; every CTA claims until it sees an index >= ntiles (work units), so
// one launch advances the head by exactly ntiles + gridDim.x and the next launch's base is known on the host
// (an epoch, no reset).
struct QueueClaim {
  u64* head;
  u64 base;
  i32 ntiles;
  KOSMOS_DEVICE i32 operator()() const {
    const u64 v = atomic_add_relaxed_dev(head, 1ull) - base;
    return v < u64(ntiles) ? i32(v) : -1;
  }
};

}  // namespace gemm
}  // namespace kosmos
