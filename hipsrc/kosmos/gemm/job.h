// One builder job: what a builder call computes (schedule, operand maps), how it is fed (claim,
// readiness hook) and finished (epilogue), and whether this CTA runs it (`on`: the same in every
// thread of the CTA). tile.h's run_builder_jobs runs several in one call. It holds references:
// build it from named objects that outlive the call.
#pragma once
#include "config.h"

namespace kosmos {
namespace gemm {

template <int L, class SchedT, class ClaimT, class ReadyT, class EpiT>
struct BuilderJob {
  static constexpr int kLayout = L;
  typedef SchedT Sched;
  typedef ReadyT Ready;
  typedef EpiT Epi;
  const Sched& sched;
  const TensorMap* tma;
  const TensorMap* tmb;
  ClaimT& claim;
  const Ready& ready;
  const Epi& epi;
  bool on;
};

template <int L, class Sched, class Claim, class Ready, class Epi>
KOSMOS_DEVICE BuilderJob<L, Sched, Claim, Ready, Epi> builder_job(const Sched& sched, const TensorMap* tma,
                                                                  const TensorMap* tmb, Claim& claim,
                                                                  const Ready& ready, const Epi& epi,
                                                                  bool on = true) {
  return BuilderJob<L, Sched, Claim, Ready, Epi>{sched, tma, tmb, claim, ready, epi, on};
}

// A job's whole record -- operand maps, output map, problem, epilogue -- in global memory, where a
// kernel with more jobs than its parameters can hold (HIP's 4 KB) reads it; the host writes it with
// a launch before (kosmos/runtime/records.py) and mirrors the layout (gemm.job_record_dtype). The
// maps are used in place (acquire_maps first), the problem by reference, the epilogue copied.
template <class Epi>
struct JobRecord {
  TensorMap a, b, c;
  Problem p;
  Epi epi;
  // Every thread, before the job's first TMA use of the maps.
  KOSMOS_DEVICE void acquire_maps() const {
    fence_tensormap_acquire(&a);
    fence_tensormap_acquire(&b);
    fence_tensormap_acquire(&c);
  }
};

// Work beside a builder call (run_builder_jobs_beside): side(t) for t in [0, n) threads, warp-
// aligned (t % kWarpSize is the lane). On Hopper the producer warpgroup's warps 1-3 run it during
// the call (96 threads, idle while thread 0 issues the TMA loads, at kProducerRegs registers);
// elsewhere the whole CTA runs it before the jobs. NoSide: nothing.
struct NoSide {
  KOSMOS_DEVICE void operator()(int) const {}
};

}  // namespace gemm
}  // namespace kosmos
