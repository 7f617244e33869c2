// The GEMM builder component: what a persistent CTA calls to compute output tiles.
//
//   kosmos::gemm::builder_init(smem);      all threads, once per kernel, before the first call
//   template <int L, class Sched, class Claim, class Ready, class Epi>
//   bool kosmos::gemm::run_builder(const Sched& sched, const TensorMap* tma, const TensorMap* tmb,
//                                  u8* smem, Claim& claim, const Ready& ready, const Epi& epi);
//
// Called by all kThreads threads of the CTA with kSmemBytes of dynamic shared memory at `smem`.
//   sched            where each unit lies (schedule.h): DenseSchedule{problem} for one GEMM,
//                    GroupedSchedule<L>{problem, table} for ragged groups.
//   claim()          i32: the next work unit's queue index (sched.tile maps it to a TileCoord), or < 0
//                    when this CTA should stop building (the queue is empty, or it should go back
//                    to moving data). Called by one thread; one claim per tile.
//   ready(tile, kb)  bool: the readiness hook, called by one thread once per unit, before the loads
//                    of its first slab (kb = tile.kb0; 0 without split-K). It may wait (a bounded wait
//                    on flags); false aborts the builder. Ready::kTrivial = true skips it and the proxy
//                    fence that follows a non-trivial hook. (Once per unit: the consumers learn of a
//                    stop at a unit's first stage only.)
//   epi              a compile-time epilogue (epilogue.h): EpiStoreBf16, EpiStoreF32, EpiAccumulateF32, EpiSwiGLU.
//                    Epi::done(tile) runs once per tile after all of its stores (completion point).
//   Several GEMMs of a kernel may also run as jobs of one call:
//   kosmos::gemm::run_builder_jobs(smem, gemm::builder_job<L1>(sched, tma, tmb, claim, ready, epi[, on]), ...)
//                    the jobs in order in one call (one register trade; the consumers go from one
//                    job's last tile to the next job's first without a CTA barrier); a job whose
//                    `on` is false is skipped (the same in every thread of the CTA); every job must
//                    have the ring's stage count and stage size (static_assert). False when a hook aborted (the
//                    jobs after it are skipped).
// Returns true when claim() ran dry, false when a readiness hook aborted (then the CTA must not
// call it again). The builder owns named barriers 1-6 (0 is __syncthreads): code beside it (side
// work on the producer's warps) or between its calls must not use them. Between calls the CTA may use its registers and the static shared memory for
// something else; the dynamic shared memory holds the pipeline, which lives for the whole kernel,
// but its first lendable_bytes(smem) bytes (the stages) may be lent out between two calls:
//   kosmos::gemm::lendable_bytes(smem)     the bytes from smem on that hold no pipeline state
//   kosmos::gemm::builder_reclaim(smem);   all threads, before the next call after such a loan
//                                          (orders the loan's generic writes before the ring's TMA)
#pragma once
#include "arch.h"
#include "config.h"
#include "epilogue.h"
#include "schedule.h"
#if KOSMOS_GEMM_WGMMA
#include "builder_wgmma.h"
#else
#include "builder_portable.h"
#endif

namespace kosmos {
namespace gemm {

KOSMOS_DEVICE void builder_init(u8* smem) { builder_init_arch(smem); }
KOSMOS_DEVICE u32 lendable_bytes(u8* smem) { return lendable_bytes_arch(smem); }
KOSMOS_DEVICE void builder_reclaim(u8* smem) { builder_reclaim_arch(smem); }

template <int L, class Sched, class Claim, class Ready, class Epi>
KOSMOS_DEVICE bool run_builder(const Sched& sched, const TensorMap* tma, const TensorMap* tmb, u8* smem,
                               Claim& claim, const Ready& ready, const Epi& epi) {
  return run_builder_arch<L>(sched, tma, tmb, smem, claim, ready, epi);
}

}  // namespace gemm
}  // namespace kosmos
